// Schema changes and data in one transaction, as knex runs migrations by
// default.
exports.up = async (knex) => {
  await knex.schema.alterTable('kx_accounts', (t) => {
    t.text('note');
    t.index(['plan_id'], 'kx_accounts_plan');
  });
  await knex('kx_plans').insert([{ id: 1, title: 'free' }, { id: 2, title: 'pro' }]);
};

exports.down = async (knex) => {
  await knex.schema.alterTable('kx_accounts', (t) => {
    t.dropIndex(['plan_id'], 'kx_accounts_plan');
    t.dropColumn('note');
  });
  await knex('kx_plans').del();
};
