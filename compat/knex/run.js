// knex (its migrations, query builder, transactions) against the database
// at process.argv[2]; prints what it saw as one JSON line. compat/knex_test.go
// runs it through a coordinator and against plain PostgreSQL and compares.
const path = require('path');
const knex = require('knex')({
  client: 'pg',
  connection: process.argv[2],
  pool: { min: 1, max: 4 },
  migrations: { directory: path.join(__dirname, 'migrations') },
});

const count = async () => Number((await knex('kx_accounts').count('* as n'))[0].n);

(async () => {
  const out = {};
  const [, log] = await knex.migrate.latest();
  out.migrated = log.map((f) => path.basename(f));
  out.version = await knex.migrate.currentVersion();

  const rows = Array.from({ length: 50 }, (_, i) => ({
    id: i + 1, name: `account ${i + 1} é`, balance: (i * 10.25).toFixed(2), plan_id: 1 + (i % 2),
  }));
  await knex('kx_accounts').insert(rows); // one INSERT over every shard
  out.count = await count();
  out.seven = await knex('kx_accounts').where({ id: 7 }).first();
  await knex('kx_accounts').where({ id: 7 }).update({ balance: 1234.5, note: 'vip' });
  out.sevenAfter = await knex('kx_accounts').where('id', 7).first('balance', 'note');

  // A transfer between two accounts (two shards), committed.
  await knex.transaction(async (trx) => {
    await trx('kx_accounts').where({ id: 1 }).decrement('balance', 5);
    await trx('kx_accounts').where({ id: 2 }).increment('balance', 5);
  });
  // One that fails midway: nothing of it stays.
  try {
    await knex.transaction(async (trx) => {
      await trx('kx_accounts').where({ id: 3 }).update({ name: 'gone' });
      await trx('kx_accounts').where({ id: 4 }).update({ balance: -1 });
      throw new Error('abort');
    });
  } catch (e) {
    out.aborted = e.message;
  }
  out.transfer = await knex('kx_accounts').whereIn('id', [1, 2, 3, 4]).orderBy('id').select('id', 'name', 'balance');

  out.byPlan = await knex('kx_accounts as a').join('kx_plans as p', 'p.id', 'a.plan_id')
    .select('p.title').count('* as n').sum('a.balance as total').groupBy('p.title').orderBy('p.title');
  out.page = await knex('kx_accounts').orderBy('balance', 'desc').limit(3).offset(2).pluck('id');
  out.returned = await knex('kx_accounts').insert({ id: 100, name: 'new', balance: 1, plan_id: 1 }).returning(['id', 'name']);
  out.deleted = await knex('kx_accounts').where('id', '>', 40).del();
  out.after = await count();
  try {
    await knex('kx_accounts').insert({ id: 1, name: 'again', plan_id: 1 });
  } catch (e) {
    out.duplicate = { code: e.code, constraint: e.constraint, table: e.table, detail: e.detail };
  }

  // Writes that run a query first, over node-postgres's extended protocol:
  // an INSERT ... SELECT from the reference table into the distributed
  // one, an UPDATE whose subquery reads the distributed table.
  out.copied = (await knex.raw('INSERT INTO kx_accounts (id, name, balance, plan_id) SELECT id + ?, title, ?, id FROM kx_plans RETURNING id, name, balance',
    [200, 2.5])).rows.sort((a, b) => Number(a.id) - Number(b.id));
  out.marked = await knex('kx_accounts').whereIn('id', knex('kx_accounts').select('id').where('balance', '<', 50)).update({ note: 'low' });
  out.low = await knex('kx_accounts').where({ note: 'low' }).orderBy('id').pluck('id');

  const [, down] = await knex.migrate.rollback(undefined, true);
  out.rolledBack = down.map((f) => path.basename(f));
  out.left = Number((await knex.raw("SELECT count(*) AS n FROM pg_catalog.pg_tables WHERE tablename IN ('kx_accounts', 'kx_plans')")).rows[0].n);
  console.log(JSON.stringify(out));
  await knex.destroy();
})().catch(async (e) => {
  console.log(JSON.stringify({ error: e.message, code: e.code }));
  await knex.destroy();
  process.exit(1);
});
