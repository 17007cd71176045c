package main

/*
#include "wait.h"
*/
import "C"

import "github.com/vgpu-probe/vgpu-probe/hybridsync"

// The plan crosses from Go to C as struct hs_plan, and what the thread
// ran comes back as struct hs_epoch_done (wait.h): cPlan and goDone are
// the one place each field is carried over, and plan_test.go fails where
// a field of one side has no counterpart on the other, or is not carried.

// The plan's size and the routes' numbers in C and in Go must agree:
// each term is a constant that does not convert to uint when negative, so
// a difference either way fails the build.
const (
	_ = uint(len(C.struct_hs_plan{}.steps)-len(hybridsync.Plan{}.Steps)) + uint(len(hybridsync.Plan{}.Steps)-len(C.struct_hs_plan{}.steps))
	_ = uint(C.HS_ROUTE_DEVICE-int(hybridsync.RouteDevice)) + uint(int(hybridsync.RouteDevice)-C.HS_ROUTE_DEVICE)
	_ = uint(C.HS_ROUTE_MODEL-int(hybridsync.RouteModel)) + uint(int(hybridsync.RouteModel)-C.HS_ROUTE_MODEL)
	_ = uint(C.HS_ROUTE_POLICY-int(hybridsync.RoutePolicy)) + uint(int(hybridsync.RoutePolicy)-C.HS_ROUTE_POLICY)
	_ = uint(C.HS_ROUTE_SHADOW-int(hybridsync.RouteShadow)) + uint(int(hybridsync.RouteShadow)-C.HS_ROUTE_SHADOW)
)

// cPlan is p for the C side, with the libomp blocktime for the thread to
// set (-1: leave it; not the plan's: openmp.Blocktime's).
func cPlan(p hybridsync.Plan, blocktime int) C.struct_hs_plan {
	c := C.struct_hs_plan{n: C.int(p.N), len: C.int64_t(p.Len), extend: C.int64_t(p.Extend), max_len: C.int64_t(p.MaxLen),
		min_waits: C.ulong(p.MinWaits), quiet: C.int64_t(p.Quiet), quiet_frac: C.double(p.QuietFrac),
		quiet_per_run: C.int64_t(p.QuietPerRun), block_cost: C.int64_t(p.BlockCost), blocktime: C.int(blocktime)}
	for i := range min(p.N, len(p.Steps)) {
		st := p.Steps[i]
		c.steps[i] = C.struct_hs_step{blocking: boolInt(st.Blocking), event: C.int(st.Event), other: C.int(st.Other),
			event_unswitched: C.int(st.EventUnswitched), other_unswitched: C.int(st.OtherUnswitched)}
	}
	return c
}

// goDone is one epoch the C side ran, for Go.
func goDone(x C.struct_hs_epoch_done) hybridsync.EpochDone {
	return hybridsync.EpochDone{Waits: uint64(x.waits), Wall: int64(x.wall), CPU: int64(x.cpu), Blockable: int64(x.blockable),
		EventWaits: uint64(x.event_waits)}
}

// The test's view of the C structs (a test file cannot use cgo).
type (
	cPlanT = C.struct_hs_plan
	cDoneT = C.struct_hs_epoch_done
)
