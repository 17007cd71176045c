package bench

import (
	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

func addMitigateFlag(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.Mitigate, "mitigate", "", "give each benchmark cell's threads (not the co-runner's) a short EEVDF slice, as the agent's --mitigate does: "+mitigate.Usage+" (needs Linux 6.12+)")
}

// parseMitigate parses --mitigate with the agent's parser.
func (o *Options) parseMitigate() error {
	if o.Mitigate == "" {
		return nil
	}
	cfg, err := mitigate.Parse(o.Mitigate)
	if err != nil {
		return err
	}
	o.mitigation = &cfg
	return nil
}
