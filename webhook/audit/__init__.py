"""Dry-run audits: what the rules would deny, warn about or change, on manifests or a live cluster.

sources (files, stdin) and cluster (live API) produce objects one at a time; results runs the
engine on each and counts them per rule and namespace (Tally: audit's own; the server counts in
its metrics); run (the Runner) takes the sources and options of one audit through them, parallel
for --jobs; formats holds every command's output formats and writes the reports. The `audit`
command only turns flags into a run.

This package imports nothing itself: a command's parser reads the format table
(webhook.audit.formats) without loading the engine. Import from the modules.
"""
