package wire

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestBudget: bodies larger than the buffer take their size from the
// shared budget until the reader's next message; a reader that cannot get
// its share in time fails with *BudgetError before reading the body, and
// small bodies take nothing.
func TestBudget(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100)
	var stream []byte
	stream = AppendFrame(stream, 'Q', big)
	stream = AppendFrame(stream, 'S', nil)
	b := NewBudget(150, 50*time.Millisecond)
	r1 := NewReader(bytes.NewReader(stream), 16)
	r1.SetBudget(b)
	r2 := NewReader(bytes.NewReader(stream), 16)
	r2.SetBudget(b)
	if f, err := r1.Next(); err != nil || !bytes.Equal(f.Body, big) {
		t.Fatalf("r1: %q %v", f.Body, err)
	}
	// r1 holds 100 of 150: r2's 100 must wait, and gives up.
	var be *BudgetError
	if _, err := r2.Next(); !errors.As(err, &be) || be.Len != 100 || be.Wait == 0 {
		t.Fatalf("r2 while r1 holds its body: %v, want a BudgetError after waiting", err)
	}
	// r1's next message gives its body back; a small one takes nothing.
	if f, err := r1.Next(); err != nil || f.Type != 'S' {
		t.Fatalf("r1 second frame: %v %v", f, err)
	}
	r3 := NewReader(bytes.NewReader(stream), 16)
	r3.SetBudget(b)
	done := make(chan error, 1)
	go func() { _, err := r3.Next(); done <- err }()
	if err := <-done; err != nil {
		t.Fatalf("r3 after r1 moved on: %v", err)
	}
	// A waiter gets the memory as soon as it is given back.
	b2 := NewBudget(100, 5*time.Second)
	w1 := NewReader(bytes.NewReader(stream), 16)
	w1.SetBudget(b2)
	if _, err := w1.Next(); err != nil {
		t.Fatal(err)
	}
	w2 := NewReader(bytes.NewReader(stream), 16)
	w2.SetBudget(b2)
	go func() { _, err := w2.Next(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	w1.Release()
	if err := <-done; err != nil {
		t.Fatalf("w2 after w1 released: %v", err)
	}
	// A body larger than the whole budget fails at once.
	tiny := NewReader(bytes.NewReader(stream), 16)
	tiny.SetBudget(NewBudget(99, time.Hour))
	if _, err := tiny.Next(); !errors.As(err, &be) || be.Wait != 0 {
		t.Fatalf("body over the budget: %v", err)
	}
}
