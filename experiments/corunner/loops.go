package corunner

import "context"

// sink keeps the compiler from removing the loops' work.
//
//lint:ignore U1000 written, never read, on purpose
var sink float64

var loops = map[string]func(context.Context){
	"while1": func(context.Context) {
		//lint:ignore SA5002 spinning is the co-runner's whole job
		for {
		}
	},
	"matmul": func(context.Context) {
		// 192x192 doubles, three matrices: 864 KiB, about an L2's worth.
		const n = 192
		a, b, c := make([]float64, n*n), make([]float64, n*n), make([]float64, n*n)
		for i := range a {
			a[i], b[i] = float64(i%7), float64(i%5)
		}
		for {
			for i := 0; i < n; i++ {
				for k := 0; k < n; k++ {
					aik := a[i*n+k]
					for j := 0; j < n; j++ {
						c[i*n+j] += aik * b[k*n+j]
					}
				}
			}
			sink += c[n+1]
		}
	},
	"stream": func(context.Context) {
		// STREAM triad over 3 x 32 MiB: larger than any current LLC
		// slice a tenant gets, so it streams from memory.
		const n = 4 << 20
		a, b, c := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range b {
			b[i], c[i] = 1, 2
		}
		for {
			for i := range a {
				a[i] = b[i] + 3*c[i]
			}
			sink += a[n/2]
		}
	},
}
