package coordinator

import (
	"log/slog"
	"runtime"
	"syscall"
	"time"
)

// AdaptProcs sizes GOMAXPROCS to the process's CPU use, from 1 up to the
// runtime's GOMAXPROCS when it is called, until stop is called; it returns
// at once (and stop does nothing) when that is 1.
//
// A relay spends most of its time in syscalls and wake-ups. Every
// processor the runtime may run on that has nothing to do is woken when a
// socket becomes readable, spins looking for work and sleeps again (futex,
// nanosleep, sched_yield): on the 2-core development machine a coordinator
// relaying point reads used 62 µs of CPU per query with 2 processors and
// 34 µs with 1, and answered more queries (it shares the cores with its
// workers and clients). So the coordinator starts with one processor and
// doubles them while it uses over three quarters of them, and halves them
// when it uses under 30% (the band is wide: the same load costs more CPU
// on more processors). It looks once a second.
func AdaptProcs(log *slog.Logger) (stop func()) {
	limit := runtime.GOMAXPROCS(0)
	if limit <= 1 {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		cur := 1
		runtime.GOMAXPROCS(cur)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		lastCPU, lastAt := cpuTime(), time.Now()
		for {
			select {
			case <-done:
				runtime.GOMAXPROCS(limit)
				return
			case <-t.C:
			}
			now, cpu := time.Now(), cpuTime()
			used := (cpu - lastCPU).Seconds() / now.Sub(lastAt).Seconds() // cores
			lastCPU, lastAt = cpu, now
			if next := nextProcs(cur, limit, used); next != cur {
				runtime.GOMAXPROCS(next)
				log.Debug("GOMAXPROCS adapted", "from", cur, "to", next, "cores_used", used)
				cur = next
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// nextProcs is the processor count after a second at cur processors in
// which the process used used cores (limit: the most).
func nextProcs(cur, limit int, used float64) int {
	switch {
	case used > 0.75*float64(cur) && cur < limit:
		return min(limit, 2*cur)
	case used < 0.3*float64(cur) && cur > 1:
		return max(1, cur/2)
	}
	return cur
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
