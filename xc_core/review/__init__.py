"""What reviewers read: a run rendered as Markdown or one self-contained HTML file, the diff of two runs and the
CI gate on it. Everything here renders a Report (report.json); nothing compiles."""

# The hidden first line of xc's pull-request comment (github.py); here so the CLI's parser can name it without
# importing the HTTP client.
COMMENT_MARKER = "<!-- xc-report -->"
