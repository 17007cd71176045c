// Package kubernetes holds the agent's DaemonSet manifest (daemonset.yaml)
// and its tests: the manifest read strictly into the Kubernetes API's own
// types, held to the systemd unit's capabilities, memory limit and
// directories, and the image run under podman as the manifest runs it.
package kubernetes
