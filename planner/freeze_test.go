package planner

import "testing"

func TestFreezeTime(t *testing.T) {
	const at = "2026-12-03 08:23:51.123456+00"
	for _, tc := range []struct{ in, want string }{
		{"UPDATE t SET u = now() WHERE v < now() - interval '1 day'",
			"UPDATE t SET u = '2026-12-03 08:23:51.123456+00'::timestamp with time zone WHERE v < ('2026-12-03 08:23:51.123456+00'::timestamp with time zone - '1 day'::interval)"},
		{"INSERT INTO t VALUES (1, CURRENT_DATE, CURRENT_TIMESTAMP(3), LOCALTIMESTAMP, LOCALTIME(2), CURRENT_TIME, pg_catalog.transaction_timestamp(), statement_timestamp())",
			"INSERT INTO t VALUES (1, '2026-12-03 08:23:51.123456+00'::timestamp with time zone::pg_catalog.date, '2026-12-03 08:23:51.123456+00'::timestamp (3) with time zone, '2026-12-03 08:23:51.123456+00'::timestamp with time zone::timestamp, '2026-12-03 08:23:51.123456+00'::timestamp with time zone::time(2), '2026-12-03 08:23:51.123456+00'::timestamp with time zone::time with time zone, '2026-12-03 08:23:51.123456+00'::timestamp with time zone, '2026-12-03 08:23:51.123456+00'::timestamp with time zone)"},
		// Not the transaction's time: left alone.
		{"UPDATE t SET u = clock_timestamp(), w = myschema.now(), x = now(1), y = CURRENT_USER", ""},
	} {
		got, n, err := FreezeTime(tc.in, at)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		want := tc.want
		if want == "" {
			want = tc.in
			if n != 0 {
				t.Errorf("%s: replaced %d", tc.in, n)
			}
		}
		if got != want {
			t.Errorf("FreezeTime(%s)\n got %s\nwant %s", tc.in, got, want)
		}
		if n > 0 {
			if again, _, err := FreezeTime(got, at); err != nil || again != got {
				t.Errorf("%s does not read back as itself: %q (%v)", got, again, err)
			}
		}
		if ReadsTime(tc.in) != (tc.want != "") {
			t.Errorf("ReadsTime(%s) = %v", tc.in, !(tc.want != ""))
		}
	}
}

func TestFillDefaults(t *testing.T) {
	cols := []string{"id", "v", "created", "day"}
	fill := []ColumnDefault{{"created", "now()"}, {"day", "CURRENT_DATE"}}
	for _, tc := range []struct{ in, want string }{
		{"INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b') RETURNING *",
			"INSERT INTO t (id, v, created, day) VALUES (1, 'a', now(), current_date), (2, 'b', now(), current_date) RETURNING *"},
		{"INSERT INTO t (id, created, v) VALUES (1, DEFAULT, 'a'), (2, '2020-01-01', DEFAULT)",
			"INSERT INTO t (id, created, v, day) VALUES (1, now(), 'a', current_date), (2, '2020-01-01', DEFAULT, current_date)"},
		{"INSERT INTO t VALUES (1, 'a'), (2, 'b')",
			"INSERT INTO t (id, v, created, day) VALUES (1, 'a', now(), current_date), (2, 'b', now(), current_date)"},
		{"INSERT INTO t VALUES (1, 'a', DEFAULT, '2020-01-01')",
			"INSERT INTO t (id, v, created, day) VALUES (1, 'a', now(), '2020-01-01')"},
		{"INSERT INTO t DEFAULT VALUES", "INSERT INTO t (created, day) VALUES (now(), current_date)"},
		{"INSERT INTO t (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = excluded.v",
			"INSERT INTO t (id, v, created, day) VALUES ($1, $2, now(), current_date) ON CONFLICT (id) DO UPDATE SET v = excluded.v"},
		// Not VALUES rows: unchanged.
		{"INSERT INTO t SELECT * FROM u", ""},
		{"UPDATE t SET v = DEFAULT", ""},
	} {
		got, ok, err := FillDefaults(tc.in, cols, fill)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		want := tc.want
		if want == "" {
			want = tc.in
			if ok {
				t.Errorf("%s: filled", tc.in)
			}
		}
		if got != want {
			t.Errorf("FillDefaults(%s)\n got %s\nwant %s", tc.in, got, want)
		}
	}
}
