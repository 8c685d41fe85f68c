// Tables, distributed outside a transaction as Citus users do it (the
// Citus functions commit on their own). On plain PostgreSQL (the test's
// oracle) the Citus calls are left out.
exports.config = { transaction: false };

exports.up = async (knex) => {
  await knex.schema.createTable('kx_accounts', (t) => {
    t.bigInteger('id').primary();
    t.text('name').notNullable();
    t.decimal('balance', 12, 2).notNullable().defaultTo(0);
    t.integer('plan_id');
  });
  await knex.schema.createTable('kx_plans', (t) => {
    t.integer('id').primary();
    t.text('title').notNullable();
  });
  if (!process.env.PLAIN) {
    await knex.raw("SELECT create_distributed_table('kx_accounts', 'id', shard_count => 4)");
    await knex.raw("SELECT create_reference_table('kx_plans')");
  }
};

exports.down = async (knex) => {
  await knex.schema.dropTable('kx_accounts');
  await knex.schema.dropTable('kx_plans');
};
