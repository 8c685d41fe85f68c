package coordinator

import (
	"reflect"
	"testing"
)

func TestParseCollations(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{`c pg_catalog."C"`, map[string]string{"c": `pg_catalog."C"`}, false},
		{`"I cu" pg_catalog."en-x-icu",name public.mine`, map[string]string{"I cu": `pg_catalog."en-x-icu"`, "name": "public.mine"}, false},
		{`"a ""q"", b" "my sch"."x,y"`, map[string]string{`a "q", b`: `"my sch"."x,y"`}, false},
		{`c`, nil, true},
		{`"open pg_catalog.x`, nil, true},
	} {
		got, err := parseCollations(c.in)
		if (err != nil) != c.err || !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
