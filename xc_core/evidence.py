"""Evidence kinds: every block of figures in a report says how it was obtained (see DESIGN.md)."""
MEASURED = "measured"                    # we ran it on this host and measured it
REPORTED = "reported"                    # the compiler / runtime told us (profiling JSON, runtime model)
PREDICTED_RUNTIME = "predicted-runtime"  # the runtime's own checker predicted it (ORT partition checker)
PREDICTED_RULES = "predicted-rules"      # our rule table predicted it; each rule cites its public source
EMULATED = "emulated"                    # computed by emulating a runtime this host cannot run

ALL = (MEASURED, REPORTED, PREDICTED_RUNTIME, PREDICTED_RULES, EMULATED)
