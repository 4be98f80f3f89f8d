"""The trust boundaries of docs/security.md: what a session config may reach (``session_checks``),
which secrets (``secrets``) and URLs (``outbound``) a run may use, and the one redactor every text
that leaves a run passes (``redact``)."""
