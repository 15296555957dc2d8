"""The kopf operator for the ElasticPolicy CRD (the operator issue fills this in)."""
