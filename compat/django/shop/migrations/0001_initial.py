from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        migrations.CreateModel(name="Country", fields=[
            ("id", models.AutoField(primary_key=True, serialize=False)),
            ("name", models.CharField(max_length=40))]),
        migrations.CreateModel(name="Customer", fields=[
            ("id", models.AutoField(primary_key=True, serialize=False)),
            ("name", models.CharField(max_length=40)),
            ("visits", models.IntegerField(default=0)),
            ("country", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to="shop.country"))]),
        migrations.CreateModel(name="Order", fields=[
            ("id", models.AutoField(primary_key=True, serialize=False)),
            ("total", models.DecimalField(decimal_places=2, max_digits=10)),
            ("placed", models.DateTimeField()),
            ("customer", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="shop.customer"))]),
        migrations.CreateModel(name="Tag", fields=[
            ("id", models.AutoField(primary_key=True, serialize=False)),
            ("label", models.CharField(max_length=20))]),
        migrations.CreateModel(name="Note", fields=[
            ("id", models.AutoField(primary_key=True, serialize=False)),
            ("text", models.TextField())]),
    ]
