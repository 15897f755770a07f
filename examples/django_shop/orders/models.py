from __future__ import annotations

from django.db import models


class Order(models.Model):
    ref = models.CharField(max_length=64, unique=True)
    item = models.CharField(max_length=64)
    qty = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
