"""`package`: distribution packages made from a verified bundle (Play AI packs)."""
