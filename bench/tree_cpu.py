"""CPU time and peak memory of a process and every process under it, sampled while it runs.

xc's CLI runs each step in a forkserver child, which the parent never waits for: getrusage(RUSAGE_CHILDREN) in the
parent misses their CPU. The benches sample the whole tree instead; a process that ends between two samples loses
at most one interval of its CPU time (`every`, 0.1 s: a few percent of a sample's analysis).
"""
from __future__ import annotations

import subprocess
import threading


class TreeSampler(threading.Thread):
    """CPU seconds and peak RSS of a process and all its descendants, sampled every `every` seconds (a process
    that ends between samples loses at most that much)."""

    def __init__(self, pid: int, every: float = 0.1):
        super().__init__(daemon=True)
        import psutil
        self.root, self.every, self.psutil = psutil.Process(pid), every, psutil
        self.cpu: dict[int, float] = {}
        self.peak_rss = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except self.psutil.Error:
                break
            rss = 0
            for p in procs:
                try:
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                    rss += p.memory_info().rss
                except self.psutil.Error:
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            self.done.wait(self.every)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())




def run_sampled(cmd: list[str], **popen_kwargs) -> tuple[str, str, TreeSampler]:
    """Run `cmd` to its end with its whole process tree sampled: (stdout, stderr, the sampler)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.done.set()
    sampler.join()
    return stdout, stderr, sampler
