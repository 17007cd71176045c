package workload

import (
	"slices"
	"strings"
	"testing"
)

func TestParseModes(t *testing.T) {
	got, err := ParseModes(ModeNames(DefaultModes))
	if err != nil || !slices.Equal(got, DefaultModes) {
		t.Errorf("round trip of %v: %v, %v", DefaultModes, got, err)
	}
	if _, err := ParseModes([]string{"spin", "nap"}); err == nil || !strings.Contains(err.Error(), `"nap"`) {
		t.Errorf("unknown mode: %v, want an error naming it", err)
	}
}
