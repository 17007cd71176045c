package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func TestThresholdFlags(t *testing.T) {
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		args string
		ok   bool
	}{
		// Publishing the page in-process loads eBPF: root only.
		{"--threshold hints,guest,static", root},
		{"--threshold guest --hints-page /x", false},
		{"--threshold hints --hints-page /dev/shm/vgpu-probe-hints", true},
		{"--threshold telepathy", false},
	} {
		cmd := NewCmd(func(context.Context, *Options) error { return nil })
		cmd.SetArgs(strings.Fields(tc.args))
		cmd.SetOut(&bytes.Buffer{})
		err := cmd.Execute()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, usage.ErrBadInput)) {
			t.Errorf("%s: %v", tc.args, err)
		}
	}
}
