// Package signal is what the wait policy knows of a thread's CPU: whether
// it competes for it (SchedSignal, from the kernel's accounting: the
// thread's run delay, its cgroups' throttling, its CPU's steal and idle
// time; HintSource, from the host agent's hint page), how much of its time
// slice is left (ThresholdSource: GuestEstimator, Static), and whether
// other threads of the process spin beside it (an OpenMP team).
//
// It holds the tree's one reader of /proc/.../schedstat (ReadSchedstat),
// which the agent, the experiments and the tests' disturbance figures use
// too. It imports nothing of hybridsync: the primitive (hybridsync) and
// the OpenMP settings (hybridsync/openmp) read it.
package signal
