"""An analysis from start to end: its plan as data (plan.py), the steps as functions of a run folder (steps.py;
the folder's files: run_folder.py), the Report assembled from the targets' results (assemble.py), and the plan run
in this process or in isolated workers (scheduler.py). Within the package each module imports only those named
after it here: scheduler → steps → assemble, run_folder → plan (.importlinter)."""
from .plan import CAPTURE_DIR, CAPTURED_FILE
from .scheduler import IsolatedRun, run_here
from .steps import rename_outputs, report_job

__all__ = ["CAPTURE_DIR", "CAPTURED_FILE", "IsolatedRun", "rename_outputs", "report_job", "run_here"]
