package cgroups

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	got := Parse([]byte("12:cpu,cpuacct:/user.slice\n1:name=systemd:/user.slice/s.scope\nbad line\n0::/user.slice/s.scope\n"))
	want := []Membership{
		{ID: "12", Controllers: []string{"cpu", "cpuacct"}, Path: "/user.slice"},
		{ID: "1", Controllers: []string{"name=systemd"}, Path: "/user.slice/s.scope"},
		{ID: "0", Path: "/user.slice/s.scope"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse: %+v, want %+v", got, want)
	}
	if !got[2].Unified() || got[0].Unified() || !got[0].Has("cpu") || got[0].Has("memory") {
		t.Errorf("Unified/Has wrong on %+v", got)
	}
}

func TestOfSelf(t *testing.T) {
	ms, err := Of("", 0)
	if err != nil || len(ms) == 0 {
		t.Fatalf("this process's cgroups: %v %v", ms, err)
	}
}
