package wire

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/semaphore"
)

// Budget bounds the memory that message bodies too large for a reader's
// buffer take across every Reader sharing it: a reader reserves a body's
// size before reading it and gives it back when the next message is read
// (or on Release), so that many clients sending large queries at once wait
// their turn instead of taking the process's memory between them.
type Budget struct {
	sem  *semaphore.Weighted
	size int64
	wait time.Duration
}

// NewBudget makes a budget of size bytes; a reader waits at most wait for
// its share.
func NewBudget(size int64, wait time.Duration) *Budget {
	return &Budget{sem: semaphore.NewWeighted(size), size: size, wait: wait}
}

// Size is the budget in bytes.
func (b *Budget) Size() int64 { return b.size }

// BudgetError is a message whose body could not get its share of the
// budget in time (or is larger than the whole budget). Nothing of its body
// was read; the stream is out of sync after it.
type BudgetError struct {
	Type   byte
	Len    int // body bytes
	Budget int64
	Wait   time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("message type %q of %d bytes did not get memory within %v (budget %d bytes)", e.Type, e.Len, e.Wait, e.Budget)
}

// SetBudget makes the reader reserve the size of every body that does not
// fit its buffer from b before reading it.
func (r *Reader) SetBudget(b *Budget) { r.budget = b }

// Release gives back what the reader holds of its budget: the last large
// body. The caller must not use that body afterwards. Next calls it first.
func (r *Reader) Release() {
	if r.held > 0 {
		r.budget.sem.Release(r.held)
		r.held = 0
	}
}

// reserve takes n bytes of the budget for a body of type typ.
func (r *Reader) reserve(typ byte, n int) error {
	b := r.budget
	if b == nil {
		return nil
	}
	if int64(n) > b.size {
		return &BudgetError{Type: typ, Len: n, Budget: b.size}
	}
	if !b.sem.TryAcquire(int64(n)) {
		ctx, cancel := context.WithTimeout(context.Background(), b.wait)
		err := b.sem.Acquire(ctx, int64(n))
		cancel()
		if err != nil {
			return &BudgetError{Type: typ, Len: n, Budget: b.size, Wait: b.wait}
		}
	}
	r.held = int64(n)
	return nil
}
