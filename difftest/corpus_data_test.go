package difftest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// The corpus's data: deterministic rows (a fixed seed) for the tables of
// testdata/corpus/schema.sql, loaded with COPY FROM STDIN (text format)
// into the fleet, through the coordinator, and into the oracle.

// corpusSeed fixes the corpus's data; queries.sql's answers depend on it
// only through the comparison, never through expected values.
const corpusSeed = 20240610

// corpusTable is one table's rows in COPY text format.
type corpusTable struct {
	name string
	cols string // column list for COPY
	rows []string
}

func (t corpusTable) copySQL() string {
	return fmt.Sprintf("COPY %s (%s) FROM STDIN", t.name, t.cols)
}

func (t corpusTable) copyData() string {
	return strings.Join(t.rows, "\n") + "\n"
}

// copyField renders one value for COPY text format; nil is NULL.
func copyField(v any) string {
	switch v := v.(type) {
	case nil:
		return `\N`
	case string:
		r := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)
		return r.Replace(v)
	default:
		return fmt.Sprint(v)
	}
}

func copyRow(vals ...any) string {
	fs := make([]string, len(vals))
	for i, v := range vals {
		fs[i] = copyField(v)
	}
	return strings.Join(fs, "\t")
}

// maybeNull returns nil one time in n.
func maybeNull(r *rand.Rand, n int, v any) any {
	if r.IntN(n) == 0 {
		return nil
	}
	return v
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// money renders cents as a numeric with two decimals (negative allowed).
func money(cents int) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

var (
	corpusFirst = []string{"José", "Zoë", "Jürgen", "Ærøskøbing", "Łukasz", "Anna", "anna", "ANNA", "Björk", "Ólafur",
		"山田", "太郎", "Ngọc", "Σωκράτης", "Владимир", "Amélie", "Straße", "O'Brien", "Li", "Søren", "Ñandú", "Émile", "🚀 Rocket", "Zoe"}
	corpusLast = []string{"García", "Müller", "Weiß", "Groß", "Dvořák", "日本語", "Nguyễn", "Smith", "smith", "Øster",
		"Ça Va", "Łódź", "Ålund", "Tanaka", "Кузнецов", "Ünal", "de la Cruz", "Ng", "🙂", "Lee"}
	corpusTiers    = []any{"gold", "silver", "bronze", "bronze", "silver", nil, "Platinum", "gold "}
	corpusStatus   = []string{"new", "paid", "paid", "shipped", "shipped", "shipped", "cancelled", "returned", "Paid"}
	corpusNotes    = []string{"", "gift", "Gift wrap ✓", "leave at door", "déjà vu", "Größe L", "配達希望", "🎁🎉", "back\\slash", "tab\there", "line\nbreak", "50% off", "under_score", "quote'd", "café", "CAFÉ", "straße", "STRASSE"}
	corpusKinds    = []string{"view", "view", "view", "click", "click", "purchase", "signup", "error", "Click"}
	corpusPayloads = []string{`{"page":"/home"}`, `{"page":"/café"}`, `{"q":"日本語"}`, `{"q":"größe"}`, "plain", "🔥 hot", "", "ünïcödé", "NULL", "null", "x%y", "a_b"}
	corpusOffsets  = []string{"+00", "+02", "-05", "+05:30", "+09", "-03:30", "+13:45", "-10"}
	corpusRegions  = [][3]any{
		{1, "Île-de-France", "FR"}, {2, "Bayern", "DE"}, {3, "Kantō 関東", "JP"}, {4, "São Paulo", "BR"},
		{5, "Zürich", "CH"}, {6, "Ontario", "CA"}, {7, "Québec", "CA"}, {8, "Mazowieckie", "PL"},
		{9, "Catalunya", "ES"}, {10, "Ὀλυμπία", "GR"}, {11, "Nowhere", nil}, {12, "north", "us"},
	}
	corpusCategories = []any{"books", "Books", "garden", "électronique", "toys", "food", nil, "日用品"}
)

// corpusData generates the corpus's tables in load order.
func corpusData() []corpusTable {
	r := rand.New(rand.NewPCG(corpusSeed, 0x636f72707573))
	regions := corpusTable{name: "regions", cols: "region_id, name, country"}
	for _, rg := range corpusRegions {
		regions.rows = append(regions.rows, copyRow(rg[0], rg[1], rg[2]))
	}

	products := corpusTable{name: "products", cols: "product_id, name, category, list_price"}
	prices := map[int]int{}
	for id := 1; id <= 40; id++ {
		cents := 99 + r.IntN(200)*50 // ties
		prices[id] = cents
		name := fmt.Sprintf("%s %s #%d", pick(r, []string{"Widget", "Gadget", "Tasse", "Bücherregal", "傘", "Crème", "Schraube", "Lámpara", "🧸 Teddy"}),
			pick(r, []string{"mini", "Maxi", "pro", "Öko", "XL", "ß-Edition"}), id)
		products.rows = append(products.rows, copyRow(id, name, pick(r, corpusCategories), maybeNull(r, 10, money(cents))))
	}

	customers := corpusTable{name: "customers", cols: "customer_id, name, region_id, signup, tier"}
	var custIDs []int64
	for i := 1; i <= 300; i++ {
		id := int64(i)
		switch {
		case i%50 == 0:
			id = 9_000_000_000 + int64(i) // beyond int4
		case i == 7:
			id = -7
		}
		custIDs = append(custIDs, id)
		var name any = pick(r, corpusFirst) + " " + pick(r, corpusLast)
		name = maybeNull(r, 25, name)
		var region any = 1 + r.IntN(12)
		switch r.IntN(20) {
		case 0:
			region = nil
		case 1:
			region = 99 // no such region
		}
		signup := fmt.Sprintf("%04d-%02d-%02d", 2018+r.IntN(7), 1+r.IntN(12), 1+r.IntN(28))
		customers.rows = append(customers.rows, copyRow(id, name, region, maybeNull(r, 15, signup), pick(r, corpusTiers)))
	}

	orders := corpusTable{name: "orders", cols: "order_id, customer_id, placed_at, status, total, note"}
	items := corpusTable{name: "line_items", cols: "customer_id, order_id, line_no, product_id, qty, price"}
	orderID := int64(1000)
	for _, c := range custIDs {
		n := r.IntN(14)
		if c == 3 || c == 150 {
			n = 0 // customers without orders
		}
		for range n {
			orderID++
			placed := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d%s", 2019+r.IntN(6), 1+r.IntN(12), 1+r.IntN(28),
				r.IntN(24), r.IntN(60), r.IntN(60), pick(r, corpusOffsets))
			nLines := 1 + r.IntN(5)
			total := 0
			for line := 1; line <= nLines; line++ {
				prod := 1 + r.IntN(40)
				var product any = prod
				switch r.IntN(30) {
				case 0:
					product = nil
				case 1:
					product = 999 // not in products
				}
				qty := 1 + r.IntN(5)
				if r.IntN(25) == 0 {
					qty = -qty // a return
				}
				if r.IntN(40) == 0 {
					qty = 0
				}
				price := prices[prod] - r.IntN(3)*25
				total += qty * price
				items.rows = append(items.rows, copyRow(c, orderID, line, product, qty, money(price)))
			}
			var tot any = money(total)
			if r.IntN(30) == 0 {
				tot = nil
			}
			orders.rows = append(orders.rows, copyRow(orderID, c, maybeNull(r, 40, placed), pick(r, corpusStatus), tot, maybeNull(r, 4, pick(r, corpusNotes))))
		}
	}

	events := corpusTable{name: "events", cols: "event_id, customer_id, kind, at, payload, score"}
	for i := 1; i <= 3000; i++ {
		id := int64(i)
		if i%500 == 0 {
			id = 5_000_000_000 + int64(i)
		}
		var cust any = pick(r, custIDs)
		switch r.IntN(25) {
		case 0:
			cust = nil
		case 1:
			cust = int64(100_000 + r.IntN(10)) // no such customer
		}
		at := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", 2020+r.IntN(5), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60))
		if r.IntN(10) == 0 {
			at += fmt.Sprintf(".%06d", r.IntN(1000000))
		}
		// Scores are multiples of 1/4 of modest size: sums of them are
		// exact in float8 in any order.
		var score any = fmt.Sprint(float64(r.IntN(4001)-1000) / 4)
		if r.IntN(12) == 0 {
			score = nil
		}
		events.rows = append(events.rows, copyRow(id, cust, pick(r, corpusKinds), maybeNull(r, 30, at), maybeNull(r, 6, pick(r, corpusPayloads)), score))
	}
	return []corpusTable{regions, products, customers, orders, items, events}
}
