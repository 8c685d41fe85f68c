package coordinator

import "testing"

func TestEncodingEmbedsASCII(t *testing.T) {
	for enc, want := range map[string]bool{
		"UTF8": false, "utf-8": false, "LATIN1": false, "SQL_ASCII": false, "": false,
		"SJIS": true, "Shift_JIS": true, "shift-jis-2004": true, "BIG5": true, "gbk": true, "WIN_936": true,
		"GB18030": true, "JOHAB": true, "UHC": true, "windows949": true, "a-very-long-encoding-name-indeed": false,
	} {
		if got := encodingEmbedsASCII(enc); got != want {
			t.Errorf("encodingEmbedsASCII(%q) = %v, want %v", enc, got, want)
		}
	}
	// It runs at every checkout.
	if n := testing.AllocsPerRun(100, func() { encodingEmbedsASCII("Shift_JIS") }); n != 0 {
		t.Errorf("%v allocations, want none", n)
	}
}
