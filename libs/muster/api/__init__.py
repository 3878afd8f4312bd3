"""muster's wire API: the .proto (proto/muster/api/v1/) and its generated code."""
