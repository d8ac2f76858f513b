"""The GPU readiness probe a lease's VMs run at first boot (gpu-readiness-probe.sh
beside this file; the HOT templates use the same file), and the user data that
carries it next to the user's own."""
from __future__ import annotations

from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path

SCRIPT = Path(__file__).with_name("gpu-readiness-probe.sh")
PLACEHOLDERS = ("READINESS_URL", "READINESS_TOKEN", "EXPECTED_GPUS", "INSTANCE")


def readiness_url(base_url: str, lease_id: str) -> str:
    return f"{base_url.rstrip('/')}/v1/leases/{lease_id}/readiness"


def probe_script(url: str, token: str, expected_gpus: int, instance: int) -> str:
    values = {"READINESS_URL": url, "READINESS_TOKEN": token,
              "EXPECTED_GPUS": str(expected_gpus), "INSTANCE": str(instance)}
    text = SCRIPT.read_text()
    for name in PLACEHOLDERS:
        text = text.replace(f"@{name}@", values[name])
    return text


def with_probe(user_data: str | None, probe: str) -> str:
    """cloud-init multipart user data: the user's own part first, then the probe.
    The user's part goes as text/plain, which cloud-init types by its first line
    (#cloud-config, #!, ...), as it would have alone."""
    message = MIMEMultipart()
    if user_data:
        message.attach(MIMEText(user_data, "plain", "utf-8"))
    part = MIMEText(probe, "x-shellscript", "utf-8")
    part.add_header("Content-Disposition", "attachment", filename="gpu-readiness-probe.sh")
    message.attach(part)
    return message.as_string()
