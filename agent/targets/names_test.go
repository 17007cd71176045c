package targets

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tenantThreads is how many threads the tenant's process names like
// QEMU's vCPU threads.
const tenantThreads = 500

func TestMain(m *testing.M) {
	if os.Getenv("VGPU_TARGETS_ROLE") == "tenant" {
		tenant()
	}
	os.Exit(m.Run())
}

// tenant names tenantThreads threads "CPU n/KVM", says so, and sleeps.
func tenant() {
	done := make(chan struct{}, tenantThreads)
	for i := range tenantThreads {
		go func() {
			runtime.LockOSThread()
			_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", unix.Gettid()), []byte(fmt.Sprintf("CPU %d/KVM", i)), 0)
			done <- struct{}{}
			select {}
		}()
	}
	for range tenantThreads {
		<-done
	}
	fmt.Println("ready")
	// Sleep rather than select{}: with every goroutine blocked for good
	// the runtime (without -race) calls it a deadlock and exits; the
	// test kills the tenant when it is done.
	time.Sleep(time.Hour)
}

// TestTenantNamedThreadsAreNotVCPUs: a real process whose 500 threads
// call themselves "CPU n/KVM" has no vCPU, as a --pid target.
func TestTenantNamedThreadsAreNotVCPUs(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VGPU_TARGETS_ROLE=tenant")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
		t.Fatal("the tenant did not name its threads")
	}
	pid := cmd.Process.Pid
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, lastTID(t, pid)))
	p, err := NewPID(pid, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := p.Scan()
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, th := range tg.Threads {
		if th.VCPU != -1 {
			t.Fatalf("thread %d has vCPU %d", th.TID, th.VCPU)
		}
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, th.TID)); len(c) > 4 && string(c[:4]) == "CPU " {
			named++
		}
	}
	if named < tenantThreads {
		t.Fatalf("%d threads named \"CPU n/KVM\" (e.g. %q), want %d: the test made no tenant", named, comm, tenantThreads)
	}
}

func lastTID(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(ents[len(ents)-1].Name())
	return n
}
