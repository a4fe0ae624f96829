"""The TUI's screens: one per view (Overview, Requests, Models, Keys, Nodes), a request's timeline, dialogs."""
