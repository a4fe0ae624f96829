"""The TUI's screens: one per view (Overview, Requests, Models, Keys, Nodes, Batches), a request's timeline, dialogs."""
