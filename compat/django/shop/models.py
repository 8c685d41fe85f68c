from django.db import models


class Country(models.Model):
    name = models.CharField(max_length=40)


class Customer(models.Model):
    name = models.CharField(max_length=40)
    country = models.ForeignKey(Country, on_delete=models.PROTECT)
    visits = models.IntegerField(default=0)


class Order(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    placed = models.DateTimeField()


class Tag(models.Model):
    label = models.CharField(max_length=20)


class Note(models.Model):
    text = models.TextField()
    tag = models.ForeignKey(Tag, null=True, on_delete=models.SET_NULL)
