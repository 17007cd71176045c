package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func TestWebConfigFlag(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--pid", "1", "--web.config.file", "/etc/vgpu-probe/web.yml"})
	if err := cmd.Execute(); err != nil || got.WebConfigFile != "/etc/vgpu-probe/web.yml" {
		t.Fatalf("%v, %+v", err, got)
	}
}

// A web config that is malformed, missing, or names missing certificate
// files is a one-line user error before any eBPF is loaded.
func TestWebConfigBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"malformed":    "tls_server_config: [\n  nope",
		"missing cert": "tls_server_config:\n  cert_file: absent.crt\n  key_file: absent.key\n",
		"absent":       "",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yml")
		if body != "" {
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		o := &Options{PIDs: []int{os.Getpid()}, Listen: DefaultListen, Window: time.Minute, WebConfigFile: p,
			Ctx: context.Background(), Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 },
			LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
				t.Fatal("probe loaded despite a bad web config")
				return nil, nil
			}}
		err := Run(o)
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--web.config.file") {
			t.Errorf("%s: %v, want a one-line usage error naming the flag", name, err)
		}
	}
}
