package coordinator

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/metadata"
)

func TestUserNames(t *testing.T) {
	snap := &metadata.Snapshot{Shards: map[string][]metadata.Shard{
		"public.acc": {{ID: 102008}, {ID: 102009}},
		"s.ref":      {{ID: 7}},
	}, Tables: map[string]*metadata.Table{
		"public.acc": {Name: "public.acc", ShardSchema: metadata.ShardsSchema},
		"s.ref":      {Name: "s.ref"}, // distributed before shards had their own schema
	}}
	for _, tc := range []struct{ in, want pgproto3.ErrorResponse }{
		{pgproto3.ErrorResponse{TableName: "acc_102009", ConstraintName: "acc_pkey_102009",
			Message: `duplicate key value violates unique constraint "acc_pkey_102009"`, Detail: "Key (id)=(1) already exists."},
			pgproto3.ErrorResponse{TableName: "acc", ConstraintName: "acc_pkey",
				Message: `duplicate key value violates unique constraint "acc_pkey"`, Detail: "Key (id)=(1) already exists."}},
		// Unknown ids, unquoted text and key values stay.
		{pgproto3.ErrorResponse{TableName: "acc_5", Message: `relation "acc_5" and acc_102009`, Detail: "Key (t)=(acc_102009) already exists."},
			pgproto3.ErrorResponse{TableName: "acc_5", Message: `relation "acc_5" and acc_102009`, Detail: "Key (t)=(acc_102009) already exists."}},
		{pgproto3.ErrorResponse{Message: `insert on "public.ref_7" and "x_07" and "_7" and "ref_7_"`},
			pgproto3.ErrorResponse{Message: `insert on "public.ref" and "x_07" and "_7" and "ref_7_"`}},
		{pgproto3.ErrorResponse{Detail: `Key (id)=(2) is not present in table "acc_102008".`},
			pgproto3.ErrorResponse{Detail: `Key (id)=(2) is not present in table "acc".`}},
		// The schema field becomes the table's; a qualified shard name the
		// table's qualified name.
		{pgproto3.ErrorResponse{SchemaName: "pgfleet_shards", TableName: "acc_102009", ConstraintName: "acc_pkey_102009"},
			pgproto3.ErrorResponse{SchemaName: "public", TableName: "acc", ConstraintName: "acc_pkey"}},
		{pgproto3.ErrorResponse{SchemaName: "s", TableName: "ref_7"}, pgproto3.ErrorResponse{SchemaName: "s", TableName: "ref"}},
		{pgproto3.ErrorResponse{Message: `relation "pgfleet_shards.acc_102008" does not exist`},
			pgproto3.ErrorResponse{Message: `relation "public.acc" does not exist`}},
		// A user's table whose name only ends like a shard's (its schema is
		// not the shards'): nothing changes.
		{pgproto3.ErrorResponse{SchemaName: "public", TableName: "invoice_102009", ConstraintName: "invoice_102009_pkey",
			Message: `duplicate key value violates unique constraint "invoice_102009_pkey"`},
			pgproto3.ErrorResponse{SchemaName: "public", TableName: "invoice_102009", ConstraintName: "invoice_102009_pkey",
				Message: `duplicate key value violates unique constraint "invoice_102009_pkey"`}},
	} {
		got := tc.in
		userNames(snap, &got)
		if got.SchemaName != tc.want.SchemaName || got.TableName != tc.want.TableName || got.ConstraintName != tc.want.ConstraintName ||
			got.Message != tc.want.Message || got.Detail != tc.want.Detail {
			t.Errorf("userNames(%+v)\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
}

// TestUserNamesGoneShard: on the paths that map names only, a worker's
// 42P01 on a shard the catalog no longer has (a split dropped it after the
// statement was routed) is the retryable 40001, not the shard's name
// (found by an adversary).
func TestUserNamesGoneShard(t *testing.T) {
	snap := &metadata.Snapshot{Shards: map[string][]metadata.Shard{"public.acc": {{ID: 102060}, {ID: 102061}}},
		Tables: map[string]*metadata.Table{"public.acc": {Name: "public.acc", ShardSchema: metadata.ShardsSchema}}}
	er := pgproto3.ErrorResponse{Code: "42P01", Message: `relation "pgfleet_shards.acc_102008" does not exist`}
	if !userNames(snap, &er) || er.Code != "40001" || !strings.HasSuffix(er.Message, staleShardSuffix) {
		t.Errorf("a 42P01 on a shard a split dropped: %s %q", er.Code, er.Message)
	}
}
