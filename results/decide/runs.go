package decide

import (
	"slices"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// The arms of the program as it is: the reference and the A/A control.
const (
	AsIs  = "cuda-default"
	Again = "cuda-default-again"
)

// TimesOf are the good runs' times per step of arm under setting, by
// repetition (and round, for programs that compare the arms inside one
// process).
func TimesOf(runs []apptable.Run, arm, setting string) Times {
	t := Times{}
	for _, r := range runs {
		if r.Arm == arm && r.Contention == setting && r.OK() {
			t[r.Rep*1000+r.Round] = r.PerStep()
		}
	}
	return t
}

// FromRuns decides from apps' runs of one program: every arm of arms
// but the two as it is that has runs is a way, settings are the
// settings, alone first.
func FromRuns(runs []apptable.Run, arms, settings []string) Advice {
	var set []Setting
	for _, s := range settings {
		set = append(set, Setting{Name: s, AsIs: TimesOf(runs, AsIs, s), Again: TimesOf(runs, Again, s)})
	}
	var ways []Way
	for _, arm := range arms {
		if arm == AsIs || arm == Again || !slices.ContainsFunc(runs, func(r apptable.Run) bool { return r.Arm == arm }) {
			continue
		}
		w := Way{Arm: arm}
		for _, s := range settings {
			w.Times = append(w.Times, TimesOf(runs, arm, s))
		}
		for _, r := range runs {
			if r.Arm == arm && !r.OK() {
				w.Failed = r.Error
			}
		}
		ways = append(ways, w)
	}
	return Decide(ways, set)
}
