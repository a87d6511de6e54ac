"""The local platform nimbix-burst is developed and demonstrated on: a real control plane (and
node), the add-on installed on it, the JARVICE emulator, and the demo. Never imported by the
product (`webhook`, `entrypoint`); used by the demo, dev-up, bench, replay and tests."""
