"""The torch side shared by the runtime and the estimators (DESIGN.md's ``nn`` layer)."""
