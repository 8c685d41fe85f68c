from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):
    # AddField of a foreign key: ALTER TABLE ... ADD COLUMN ... CONSTRAINT
    # ... DEFERRABLE INITIALLY DEFERRED; SET CONSTRAINTS ... IMMEDIATE.
    dependencies = [("shop", "0002_distribute")]
    operations = [
        migrations.AddField(model_name="note", name="tag",
                            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, to="shop.tag")),
    ]
