"""`wf lint`: every document checked offline, job specs through the compiler. Pure."""
