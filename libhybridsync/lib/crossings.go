package main

/*
#include "core.h"
#include "stats.h"
*/
import "C"

import "sync/atomic"

// intoGo counts the calls from C into Go: hsgo_sync's by the kind of its
// wait (HS_WAIT_*), hsgo_epoch's (reports), and every other exported
// function's (configuration, stats, kernel names: none is on a wait's
// path).
var intoGo struct {
	waits          [3]atomic.Uint64
	reports, other atomic.Uint64
}

// crossings is the stats file's account of the wait path's calls into Go
// (docs/architecture.md, "One wait"): how each kind of wait went, as the C
// side counted them, and the calls into Go, as Go counted them. A wait
// crosses into Go only through the policy: into_go of a kind equals its
// waits' "policy" count; a report crosses once.
type crossings struct {
	Waits  map[string]map[string]uint64 `json:"waits"`
	IntoGo map[string]uint64            `json:"into_go"`
}

var (
	waitKinds = [3]string{C.HS_WAIT_EVENT: "event", C.HS_WAIT_STREAM: "stream", C.HS_WAIT_CTX: "ctx"}
	waitPaths = [C.HS_PATHS]string{C.HS_PATH_READY: "ready", C.HS_PATH_DEVICE: "device", C.HS_PATH_SHADOW: "shadow", C.HS_PATH_POLICY: "policy"}
)

func crossingStats() *crossings {
	c := &crossings{Waits: map[string]map[string]uint64{}, IntoGo: map[string]uint64{}}
	for k, kind := range waitKinds {
		m := map[string]uint64{}
		for p, path := range waitPaths {
			m[path] = uint64(C.hs_waits_counted(C.int(k), C.int(p)))
		}
		c.Waits[kind] = m
		c.IntoGo[kind] = intoGo.waits[k].Load()
	}
	c.IntoGo["reports"] = intoGo.reports.Load()
	c.IntoGo["other"] = intoGo.other.Load()
	return c
}
