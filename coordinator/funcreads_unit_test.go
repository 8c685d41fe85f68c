package coordinator

import "testing"

// TestBodyReads: which function bodies keep a table from being
// distributed: those that read it, or may (a string naming it may be run
// as SQL; a body that does not parse, or in another language, whenever
// the word is there); not those where the name is only a parameter,
// variable, column or function, or in a comment or a RAISE message.
func TestBodyReads(t *testing.T) {
	plpgsql := func(body string) *string {
		d := "CREATE FUNCTION f(t int, items text) RETURNS text LANGUAGE plpgsql AS $fn$ " + body + " $fn$"
		return &d
	}
	for _, c := range []struct {
		lang, src string
		def       *string
		rel       string
		want      bool
	}{
		{"sql", "SELECT t::text", nil, "t", false},
		{"sql", "SELECT items(t) -- reads items", nil, "items", false},
		{"sql", "SELECT count(*) FROM items WHERE id = t", nil, "items", true},
		{"sql", "SELECT count(*) FROM public.Items", nil, "items", true},
		{"sql", "INSERT INTO log SELECT * FROM x JOIN items USING (id)", nil, "items", true},
		{"sql", "SELECT 'you have ' || n || ' items'", nil, "items", true},
		{"sql", "SELECT query_to_xml('select * from items', true, true, '')", nil, "items", true},
		{"sql", "SELECT 'itemsx'", nil, "items", false},
		{"sql", "SELECT FROM WHERE items", nil, "items", true},
		{"sql", "SELECT FROM WHERE other", nil, "items", false}, // does not parse: the word decides
		{"plpgsql", "", plpgsql("BEGIN PERFORM set_config('app.x', t::text, false); RETURN t::text; END"), "t", false},
		{"plpgsql", "", plpgsql("DECLARE n int; BEGIN n := length(items); RAISE NOTICE 'no items here %', n; RETURN n; END"), "items", false},
		{"plpgsql", "", plpgsql("DECLARE r record; BEGIN FOR r IN SELECT * FROM items LOOP END LOOP; RETURN 'x'; END"), "items", true},
		{"plpgsql", "", plpgsql("DECLARE c CURSOR FOR SELECT id FROM items; BEGIN RETURN 'x'; END"), "items", true},
		{"plpgsql", "", plpgsql("BEGIN UPDATE items SET v = 1; RETURN 'x'; END"), "items", true},
		{"plpgsql", "", plpgsql("DECLARE n int; BEGIN n := (SELECT count(*) FROM items); RETURN n; END"), "items", true},
		{"plpgsql", "", plpgsql("BEGIN EXECUTE 'SELECT 1 FROM ' || 'items'; RETURN 'x'; END"), "items", true},
		{"plpgsql", "", plpgsql("BEGIN RETURN (SELECT v FROM items LIMIT 1); END"), "items", true},
		{"plpgsql", "BEGIN PERFORM 1 FROM items; END", nil, "items", true}, // no definition to parse: the word decides
		{"plpython3u", "return plpy.execute('select 1')", nil, "items", false},
		{"plpython3u", "return plpy.execute('select * from items')", nil, "items", true},
		{"plpython3u", "return plpy.execute('select * from \"items!\"')", nil, "items!", true},
		{"sql", `SELECT count(*) FROM "items!"`, nil, "items!", true},
		{"sql", `SELECT query_to_xml(E'select count(*) from g\141dgets', true, false, '')`, nil, "gadgets", true},
		{"sql", "SELECT query_to_xml('select count(*) from gad'\n'gets', true, false, '')", nil, "gadgets", true},
	} {
		if got := bodyReads(c.lang, c.src, c.def, c.rel); got != c.want {
			body := c.src
			if c.def != nil {
				body = *c.def
			}
			t.Errorf("%s body %q, table %s: reads %v, want %v", c.lang, body, c.rel, got, c.want)
		}
	}
}
