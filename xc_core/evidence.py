"""Evidence kinds: every block of figures in a report says how it was obtained, so nobody mistakes a prediction
or an emulation for a measurement."""
MEASURED = "measured"                    # we ran it on this host and measured it
REPORTED = "reported"                    # the compiler / runtime told us (profiling JSON, runtime model)
PREDICTED_RUNTIME = "predicted-runtime"  # the runtime's own checker predicted it (ORT partition checker)
PREDICTED_RULES = "predicted-rules"      # our rule table predicted it; each rule cites its public source
EMULATED = "emulated"                    # computed by emulating a runtime this host cannot run
# A figure made from a constant xc assumes (the cost model's 0.2 ms per accelerator ↔ CPU transition, its 4 GB/s
# copy bandwidth): nothing measured it, no runtime reported it, no checker or cited rule predicted it, so none of
# the kinds above may stand for it — and it must never rank beside a measured time as if it were one.
ASSUMED = "assumed"
# A vendor compiler's own performance model (Arm's Vela: cycles per layer of the NPU command stream it built): the
# toolchain computed it, not xc and not a rule table, but nothing ran — an estimate, never a measurement.
ESTIMATED_COMPILER = "estimated-compiler"

ALL = (MEASURED, REPORTED, PREDICTED_RUNTIME, PREDICTED_RULES, EMULATED, ESTIMATED_COMPILER, ASSUMED)

# In a reader's words, for legends (dashboard, HTML and Markdown reports).
HELP = {
    MEASURED: "ran on this host and measured",
    REPORTED: "the compiler / runtime reported it",
    PREDICTED_RUNTIME: "the runtime's own checker predicted it",
    PREDICTED_RULES: "xc's cited rule table predicted it",
    EMULATED: "computed by emulating a runtime this host cannot run",
    ESTIMATED_COMPILER: "the vendor compiler's own performance model estimated it (nothing ran)",
    ASSUMED: "computed from a constant xc assumes (a cost model's parameter), not measured",
}
