"""The controller, python -m webhook, as a real process over HTTPS (trustme certificates), and on the API emulator."""
