package coordinator

import (
	"testing"
	"time"
)

// TestExactDuration: a millisecond setting's value is read only in the
// forms PostgreSQL reads the same way; others are not known (0).
func TestExactDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"0": 0, "300": 300 * time.Millisecond, "300ms": 300 * time.Millisecond, " 2 s ": 2 * time.Second,
		"5min": 5 * time.Minute, "1h": time.Hour, "1d": 24 * time.Hour,
		"010": 0, "0x10": 0, "1.5s": 0, "1e3": 0, "-5": 0, "+5": 0, "5MS": 0, "5us": 0, "": 0, "s": 0,
		"99999999999": 0,
	} {
		if got := exactDuration(v); got != want {
			t.Errorf("exactDuration(%q) = %v, want %v", v, got, want)
		}
	}
	p := newSessionParams(map[string]string{"idle_in_transaction_session_timeout": "250"})
	if p.idleTxn != 250*time.Millisecond {
		t.Errorf("from the startup packet: %v, want 250ms", p.idleTxn)
	}
	p.apply(paramOp{kind: opSet, name: "idle_in_transaction_session_timeout", sql: "SET idle_in_transaction_session_timeout TO '2s'"})
	if p.idleTxn != 2*time.Second {
		t.Errorf("after SET: %v, want 2s", p.idleTxn)
	}
	p.apply(paramOp{kind: opReset, name: "idle_in_transaction_session_timeout"})
	if p.idleTxn != 250*time.Millisecond {
		t.Errorf("after RESET: %v, want the startup value 250ms", p.idleTxn)
	}
}
