"""What reviewers read: a run rendered as Markdown or one self-contained HTML file, the diff of two runs and the
CI gate on it. Everything here renders a Report (report.json); nothing compiles."""
