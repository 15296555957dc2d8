"""The ProRenaTa planner: proactive and reactive plans and their scheduler (decision core)."""
