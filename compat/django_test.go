package compat_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDjango: Django (Debian's python3-django) runs compat/django/check.py
// through a coordinator and against plain PostgreSQL (the oracle, without
// the Citus calls of its second migration); the two must print the same.
// Its migrations make a reference table, a distributed one and one
// colocated with it (keyed by the customer), and add a foreign key as
// Django does (SET CONSTRAINTS ... IMMEDIATE in the same string); then
// rows with their ids given and loaddata's sequence reset (setval of
// max(id) over each table), bulk_create drawing ids over every shard, an
// update() with a correlated Subquery/OuterRef, an update() with
// TruncMonth, reads over every shard joined to the reference table, a
// save(), and a temporary table made and dropped (the connection reads
// every shard after).
func TestDjango(t *testing.T) {
	check := exec.Command(debianPython, "-c", "import django, psycopg2")
	if out, err := check.CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Django and psycopg2 are needed (scripts/test installs them with apt): %v\n%s", err, out)
		}
		t.Skip("python3-django is not installed for " + debianPython)
	}
	dir := copied(t, "django", "check.py", "shop/__init__.py", "shop/models.py", "shop/migrations/__init__.py",
		"shop/migrations/0001_initial.py", "shop/migrations/0002_distribute.py", "shop/migrations/0003_note_tag.py")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := newOracle(t, ctx, "dj_plain", "shop_note, shop_tag, shop_order, shop_customer, shop_country, django_migrations")
	run := func(url string, env ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, debianPython, "check.py", url)
		cmd.Dir = dir
		return output(t, cmd, append(env, "PYTHONPATH="+dir)...)
	}
	want := run("postgresql://postgres@"+o.plain+"/dj_plain", "PLAIN=1")
	got := run("postgresql://postgres@" + o.srv.Addr() + "/postgres")
	if got != want {
		t.Errorf("through the coordinator:\n%s\nplain PostgreSQL:\n%s", got, want)
	}
	for _, line := range []string{"next country: 10", "next customer: 31", "orders: 45 True", "updated: 21", "saved: seven", "count after temp: 31", "notes: [('n', 'x')]"} {
		if !strings.Contains(want, line) {
			t.Errorf("the check's own figures: %q missing from\n%s", line, want)
		}
	}
	// The workers' shards hold what the tables show.
	for _, tb := range []string{"shop_customer", "shop_order"} {
		if n := o.shardRows(t, ctx, tb); n == 0 {
			t.Errorf("%s: no rows in its shards on the workers", tb)
		}
	}
	o.noPrepared(t, ctx)
}
