package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// snake is a Go field's name as the C side spells it: MaxLen max_len,
// CPU cpu.
func snake(name string) string {
	var b strings.Builder
	r := []rune(name)
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// number reads an integer, float or bool field as a float64.
func number(v reflect.Value) float64 {
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return 1
		}
		return 0
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint())
	}
	return float64(v.Int())
}

// fill sets every number of v (a settable struct, array or number) to a
// distinct value from *next, unexported fields (cgo's) included.
func fill(v reflect.Value, next *int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			fill(reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), next)
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), next)
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float32, reflect.Float64:
		*next++
		v.SetFloat(float64(*next) + 0.5)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		*next++
		v.SetUint(uint64(*next))
	default:
		*next++
		v.SetInt(int64(*next))
	}
}

// diff names each field of g (Go) without a C field of its name in c,
// each field of c that has none in g and is not in cOnly, and each pair
// whose values differ (arrays element by element).
func diff(where string, g, c reflect.Value, cOnly ...string) []string {
	var out []string
	seen := map[string]bool{}
	for i := range g.NumField() {
		name := snake(g.Type().Field(i).Name)
		seen[name] = true
		cf := c.FieldByName(name)
		if !cf.IsValid() {
			out = append(out, fmt.Sprintf("%s: Go's %s has no C field %s", where, g.Type().Field(i).Name, name))
			continue
		}
		gf := g.Field(i)
		if gf.Kind() == reflect.Array {
			if gf.Len() != cf.Len() {
				out = append(out, fmt.Sprintf("%s.%s: %d in Go, %d in C", where, name, gf.Len(), cf.Len()))
				continue
			}
			for j := range gf.Len() {
				out = append(out, diff(where+"."+name, gf.Index(j), cf.Index(j))...)
			}
			continue
		}
		if number(gf) != number(cf) {
			out = append(out, fmt.Sprintf("%s.%s: %v in Go, %v in C: not carried over", where, name, number(gf), number(cf)))
		}
	}
	for i := range c.NumField() {
		if name := c.Type().Field(i).Name; !seen[name] && !strings.HasPrefix(name, "_") && !slices.Contains(cOnly, name) {
			out = append(out, fmt.Sprintf("%s: C's %s has no Go field", where, name))
		}
	}
	return out
}

// TestPlanLayout: hybridsync.Plan and its Steps have the fields of
// struct hs_plan and hs_step (wait.h), by name, and cPlan carries each
// over; struct hs_epoch_done and hybridsync.EpochDone the same the other
// way, through goDone. A field added on one side only fails here.
func TestPlanLayout(t *testing.T) {
	var p hybridsync.Plan
	next := 0
	fill(reflect.ValueOf(&p).Elem(), &next)
	p.N = len(p.Steps) // every step carried
	c := cPlan(p, 7)
	for _, d := range diff("hs_plan", reflect.ValueOf(p), reflect.ValueOf(c), "blocktime") {
		t.Error(d)
	}
	if c.blocktime != 7 {
		t.Errorf("hs_plan.blocktime %d, want 7", c.blocktime)
	}

	var d cDoneT
	fill(reflect.ValueOf(&d).Elem(), &next)
	for _, x := range diff("hs_epoch_done", reflect.ValueOf(goDone(d)), reflect.ValueOf(d)) {
		t.Error(x)
	}
}

// The test's own check: a Go field without its C one, a C field without
// its Go one and a value not carried over are each found.
func TestPlanLayoutFinds(t *testing.T) {
	g := struct {
		MaxLen  int64
		Surplus int64
	}{MaxLen: 5}
	got := strings.Join(diff("hs_plan", reflect.ValueOf(g), reflect.ValueOf(cPlan(hybridsync.Plan{MaxLen: 4}, -1))), "\n")
	for _, want := range []string{"Go's Surplus has no C field surplus", "hs_plan.max_len: 5 in Go, 4 in C", "C's quiet_frac has no Go field"} {
		if !strings.Contains(got, want) {
			t.Errorf("diff says %q, want it to say %s", got, want)
		}
	}
}
