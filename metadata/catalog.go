package metadata

import (
	"fmt"
	"hash/fnv"
	"net"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Node is a PostgreSQL worker.
type Node struct {
	ID     int32
	Host   string
	Port   int
	Active bool
	// ShouldHaveShards: new distributed tables and the rebalancer put
	// shards on the node (citus_drain_node clears it).
	ShouldHaveShards bool
}

// Addr is host:port.
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// TableKind says how a table's rows are placed.
type TableKind byte

const (
	// Distributed tables are hash-partitioned into shards by one column.
	Distributed TableKind = 'h'
	// Reference tables have a full copy on every active node.
	Reference TableKind = 'n'
)

// Table is a table pgfleet knows about. Name is schema-qualified
// ("public.accounts") and as PostgreSQL spells it (lower case unless quoted).
type Table struct {
	Name         string
	Kind         TableKind
	DistColumn   string // distributed tables only
	DistType     string // PostgreSQL type name of DistColumn: int2, int4, int8, text, varchar, uuid
	ColocationID int32
	ShardCount   int
	// Sequences are the columns whose values come from a sequence (serial,
	// identity): the coordinator draws them on the default node, where the
	// table and its sequences live, and gives them to the shards, whose
	// columns have no default.
	Sequences []SeqColumn
	// ShardSchema is the schema of the table's shards on the workers:
	// ShardsSchema, or "" for a table distributed before shards had a
	// schema of their own (its shards are in the table's schema).
	ShardSchema string
}

// ShardsSchema is where a table's shards live on the workers: a schema of
// their own, out of the user's search_path, so that psql's \dt, ORMs'
// introspection and migration tools see the user's tables and not
// accounts_102008 beside them.
const ShardsSchema = "pgfleet_shards"

// Schema is the table's schema ("public" for "public.accounts"): Name up
// to its first dot (a table's name may have dots, "public.d.t"; a schema
// with one is not told apart).
func (t *Table) Schema() string { return t.Name[:strings.IndexByte(t.Name, '.')] }

// ShardsIn is the schema that holds the table's shards.
func (t *Table) ShardsIn() string {
	if t.ShardSchema != "" {
		return t.ShardSchema
	}
	return t.Schema()
}

// SeqColumn is a column of a table whose default is its sequence's next
// value: a serial column (Identity 0), or an identity column generated
// BY DEFAULT ('d') or ALWAYS ('a'). Sequence is the sequence's OID on the
// default node, as the column's default names it (renaming or re-owning
// it changes nothing, as in PostgreSQL).
type SeqColumn struct {
	Column   string
	Identity byte
	Sequence uint32
}

// Sequence returns the table's sequence column named col, or nil.
func (t *Table) Sequence(col string) *SeqColumn {
	for i := range t.Sequences {
		if t.Sequences[i].Column == col {
			return &t.Sequences[i]
		}
	}
	return nil
}

// Shard is one piece of a table: the rows whose hash lies in
// [MinHash, MaxHash], stored on worker Node as table Relname_ID.
// A reference table has one shard with a placement on every node.
type Shard struct {
	ID      int64
	Table   string
	MinHash int32
	MaxHash int32
	Nodes   []int32 // placements
}

// Snapshot is an immutable copy of the catalog. Routing reads it without
// locks; a change makes a new snapshot.
type Snapshot struct {
	Version int64
	Nodes   []Node
	Tables  map[string]*Table
	Shards  map[string][]Shard // by table name, sorted by MinHash
}

// Table returns the table by schema-qualified name, or nil.
func (s *Snapshot) Table(name string) *Table { return s.Tables[name] }

// Node returns the node with the id, or nil.
func (s *Snapshot) Node(id int32) *Node {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return &s.Nodes[i]
		}
	}
	return nil
}

// ShardFor returns the shard of a distributed table holding hash h.
func (s *Snapshot) ShardFor(table string, h int32) *Shard {
	shards := s.Shards[table]
	if i := ShardIndex(shards, h); i >= 0 {
		return &shards[i]
	}
	return nil
}

// ShardIndex returns the index of the shard holding hash h in shards
// (sorted by MinHash), or -1.
func ShardIndex(shards []Shard, h int32) int {
	i := sort.Search(len(shards), func(i int) bool { return shards[i].MaxHash >= h })
	if i < len(shards) && shards[i].MinHash <= h {
		return i
	}
	return -1
}

// ShardName is the name of a shard's table on its worker: the table's
// relation name with the shard id appended ("accounts_102008").
func ShardName(relname string, shardID int64) string {
	return fmt.Sprintf("%s_%d", relname, shardID)
}

// ShardObjectName is the name on a shard of a table's index or constraint
// name: name with the shard id appended ("accounts_pkey_102008"),
// shortened as Suffixed does.
func ShardObjectName(name string, shardID int64) string {
	return Suffixed(name, fmt.Sprintf("_%d", shardID))
}

// MaxIdentLen is PostgreSQL's NAMEDATALEN - 1: the longest identifier, in
// bytes, that it keeps without truncating.
const MaxIdentLen = 63

// Suffixed appends suffix to name, shortening name and adding a hash of it
// when the result would be longer than PostgreSQL keeps.
func Suffixed(name, suffix string) string {
	if len(name)+len(suffix) <= MaxIdentLen {
		return name + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	hash := fmt.Sprintf("_%08x", h.Sum32())
	keep := MaxIdentLen - len(suffix) - len(hash)
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(name[keep]) {
		keep--
	}
	return name[:keep] + hash + suffix
}

// CopiesMarker is the comment a write to a reference table carries in
// its text, naming how many copies the writer writes ("/* pgfleet:copies=2
// */"). Once citus_add_node has added a copy, a trigger on every copy
// refuses (40001) a write whose marker names fewer: a coordinator whose
// catalog is a moment behind would leave the new copy without it.
func CopiesMarker(copies int) string {
	return fmt.Sprintf(" /* pgfleet:copies=%d */", copies)
}

// HashRanges splits the int32 space into n equal, contiguous ranges, as
// Citus does: range i is [MinInt32 + i*step, MinInt32 + (i+1)*step - 1], the
// last one ending at MaxInt32.
func HashRanges(n int) [][2]int32 {
	if n <= 0 {
		return nil
	}
	const span = int64(1) << 32
	step := span / int64(n)
	out := make([][2]int32, n)
	for i := 0; i < n; i++ {
		lo := int64(-1<<31) + int64(i)*step
		hi := lo + step - 1
		if i == n-1 {
			hi = 1<<31 - 1
		}
		out[i] = [2]int32{int32(lo), int32(hi)}
	}
	return out
}

// SQLName is a catalog table name ("schema.table", as PostgreSQL spells
// it, unquoted) as SQL names it, each part quoted: for to_regclass and
// statements. The schema is what comes before the first dot.
func SQLName(name string) string {
	schema, rel, _ := strings.Cut(name, ".")
	return pgx.Identifier{schema, rel}.Sanitize()
}
