package main

/*
#include <stddef.h>
*/
import "C"

import (
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/openmp"
)

// hs_openmp_env: see hybridsync.h. The launcher asks it, through
// hybridsync-openmp, before it starts a program, and applies what it
// says: libgomp reads its wait setting once, before a preloaded library
// could change it.
//
//export hs_openmp_env
func hs_openmp_env(env *C.char, n C.size_t, why *C.char, whyN C.size_t) C.int {
	c, err := hybridsync.ParseOnly(cgetenv, hybridsync.EnvOpenMP, hybridsync.EnvLibomp)
	var v openmp.Verdict
	if err == nil {
		v, err = openmp.Launch(c, clookupEnv)
	}
	if err != nil {
		setErr(why, whyN, err.Error())
		return -1
	}
	words := v.Env
	if v.Preload != "" {
		words = append(slices.Clone(words), "LD_PRELOAD="+v.Preload)
	}
	setErr(env, n, strings.Join(words, " "))
	setErr(why, whyN, v.String())
	return 0
}
