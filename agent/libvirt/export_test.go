package libvirt

// The options the tests shorten; the agent runs with the defaults.
var (
	WithTimeout    = withTimeout
	WithRefresh    = withRefresh
	WithMaxBackoff = withMaxBackoff
)
