"""Writes the labelled redaction corpus next to this file: realistic text with planted fake PII and secrets.

Run ``.venv/bin/python tests/data/redaction/generate.py`` after changing it (the tests check the files match).
Deterministic (one seeded ``random.Random``). Every planted value is fake but valid for its kind: card numbers
pass Luhn with a real issuer prefix, IBANs have correct mod-97 check digits and their country's length, IPs
are in documentation or private ranges, phone numbers use fictional ranges (``555-01xx``, ``+44 20 7946 0xxx``),
keys and tokens are random characters in the vendors' formats, JWTs are three base64url segments whose header
is JSON, and private keys are random base64 between PEM armour. None is a real credential.

Files (media type by extension: ``.txt``/``.log`` text, ``.jsonl`` JSON Lines):

* ``tickets.txt`` — support tickets (prose), ``app.log`` — application logs, ``config.txt`` — config snippets
  (env files, YAML, INI, shell, JSON), ``records.jsonl`` — JSON Lines records (two lines are not JSON);
* ``annotations.json`` — ``[{"file", "redactor", "kind", "value"}, ...]``, every planted value;
* ``clean.txt`` and ``clean.jsonl`` — the same kinds of text with nothing to redact: timestamps, dates, times,
  versions, UUIDs, digests, order numbers, prices, ports, coordinates, base64 image data, masked and templated
  passwords, keys that name secrets but hold none.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261203
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
PER_PII_KIND = 30
PER_SECRET_KIND = 20


def uuid4(r: random.Random) -> str:
    hexes = [r.getrandbits(32), r.getrandbits(16), r.getrandbits(12), r.getrandbits(12), r.getrandbits(48)]
    return "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}".format(*hexes)


class Corpus:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.annotations: list[dict[str, str]] = []
        self.seen: set[str] = set()

    def plant(self, file: str, redactor: str, kind: str) -> str:
        """A new value of ``kind`` (none planted before is part of it, nor it of one), recorded."""
        make = self.secret if redactor == "secrets.v1" else self.pii
        value = make(kind)
        while any(value in old or old in value for old in self.seen):
            value = make(kind)
        self.seen.add(value)
        self.annotations.append({"file": file, "redactor": redactor, "kind": kind, "value": value})
        return value

    def count(self, kind: str) -> int:
        return sum(a["kind"] == kind for a in self.annotations)

    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def pii(self, kind: str) -> str:
        return str(getattr(self, kind)())

    # -- PII ------------------------------------------------------------------------------------------------------

    def email(self) -> str:
        r = self.rng
        first = r.choice(["ana", "ben", "chiara", "dmitri", "elif", "farah", "goran", "hana", "ivo", "jun"])
        last = r.choice(["kowalski", "nguyen", "okafor", "petrov", "quist", "rossi", "sato", "tanaka", "ulloa"])
        domain = r.choice(["example.com", "example.org", "mail.example.net", "corp.example.co.uk", "example.io"])
        form = r.randrange(5)
        n = r.randint(1, 999)
        local = [f"{first}.{last}", f"{first}_{last}{n}", f"{first}{n}", f"{first}.{last}+billing", f"{last}.{first}"]
        value = f"{local[form]}@{domain}"
        return value.upper() if r.random() < 0.1 else value

    def phone(self) -> str:
        r = self.rng
        d = lambda n: self.chars(string.digits, n)  # noqa: E731
        forms = [
            lambda: f"+44 20 7946 0{d(3)}",
            lambda: f"+1 (202) 555-01{d(2)}",
            lambda: f"+1-415-555-01{d(2)}",
            lambda: f"(312) 555-01{d(2)}",
            lambda: f"646-555-01{d(2)}",
            lambda: f"212.555.01{d(2)}",
            lambda: f"+49 30 {d(4)} {d(4)}",
            lambda: f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"020 7946 0{d(3)}",
            lambda: f"0151 {d(4)} {d(4)}",
            lambda: f"+4915{d(9)}",
            lambda: f"+61 2 {d(4)} {d(4)}",
            lambda: f"+81 3-{d(4)}-{d(4)}",
            lambda: f"01 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"646\u00a0555\u00a001{d(2)}",
            lambda: f"+44\u202f20\u202f7946\u202f0{d(3)}",
        ]
        return r.choice(forms)()

    def ipv4(self) -> str:
        r = self.rng
        return r.choice(
            [
                f"203.0.113.{r.randint(1, 254)}",
                f"198.51.100.{r.randint(1, 254)}",
                f"192.0.2.{r.randint(1, 254)}",
                f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
                f"172.{r.randint(16, 31)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
                f"192.168.{r.randint(0, 255)}.{r.randint(1, 254)}",
            ]
        )

    def ipv6(self) -> str:
        r = self.rng
        h = lambda: f"{r.getrandbits(16):x}"  # noqa: E731
        return r.choice(
            [
                f"2001:db8::{h()}:{h()}",
                f"2001:db8:{h()}:{h()}::{h()}",
                f"fe80::{h()}:{h()}:{h()}:{h()}",
                f"2001:0db8:{r.getrandbits(16):04x}:0000:0000:{r.getrandbits(16):04x}:0042:{r.getrandbits(16):04x}",
                f"fd12:3456:789a:{h()}::{r.randint(2, 99)}",
                f"::ffff:192.0.2.{r.randint(1, 254)}",
            ]
        )

    def luhn(self, prefix: str, length: int) -> str:
        body = prefix + self.chars(string.digits, length - len(prefix) - 1)
        total = 0
        for i, ch in enumerate(reversed(body)):
            x = int(ch)
            if i % 2 == 0:
                x = x * 2 - 9 if x > 4 else x * 2
            total += x
        return body + str((10 - total % 10) % 10)

    def card(self) -> str:
        r = self.rng
        prefix, length = r.choice(
            [("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("37", 15), ("34", 15), ("6011", 16)]
        )
        number = self.luhn(prefix, length)
        form = r.randrange(5)
        if form == 0:
            return number
        sep = [" ", "-", ".", "\u00a0"][form - 1]  # a no-break space, as a word processor writes it
        if length == 15:
            return sep.join([number[:4], number[4:10], number[10:]])
        return sep.join(number[i : i + 4] for i in range(0, 16, 4))

    def iban(self) -> str:
        r = self.rng
        country, bban = r.choice(
            [
                ("DE", lambda: self.chars(string.digits, 18)),
                ("GB", lambda: r.choice(["NWBK", "BARC", "MIDL"]) + self.chars(string.digits, 14)),
                ("NL", lambda: r.choice(["ABNA", "INGB", "RABO"]) + self.chars(string.digits, 10)),
                (
                    "FR",
                    lambda: (
                        self.chars(string.digits, 10)
                        + self.chars(string.ascii_uppercase + string.digits, 11)
                        + self.chars(string.digits, 2)
                    ),
                ),
                ("ES", lambda: self.chars(string.digits, 20)),
                ("BE", lambda: self.chars(string.digits, 12)),
            ]
        )
        body = bban()
        number = int("".join(str(int(c, 36)) for c in body + country + "00"))
        compact = f"{country}{98 - number % 97:02d}{body}"
        if r.random() < 0.2:
            compact = compact.lower()
        if r.random() < 0.5:
            return compact
        return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))

    # -- secrets --------------------------------------------------------------------------------------------------

    def b64url(self, raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def jwt(self) -> str:
        r = self.rng
        header = {"alg": r.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
        payload = {"sub": str(r.randrange(10**8)), "iat": 1760000000 + r.randrange(10**7), "scope": "read"}
        return ".".join(
            [
                self.b64url(json.dumps(header).encode()),
                self.b64url(json.dumps(payload).encode()),
                self.chars(B64URL, 43),
            ]
        )

    def private_key(self) -> str:
        kind = self.rng.choice(["RSA ", "EC ", "OPENSSH ", "", "PGP "])
        body = base64.b64encode(bytes(self.rng.getrandbits(8) for _ in range(240))).decode()
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        if kind == "PGP ":
            armour = ["-----BEGIN PGP PRIVATE KEY BLOCK-----", "Version: GnuPG v2 (GNU/Linux)", ""]
            return "\n".join([*armour, *lines, "=" + body[:4], "-----END PGP PRIVATE KEY BLOCK-----"])
        return "\n".join([f"-----BEGIN {kind}PRIVATE KEY-----", *lines, f"-----END {kind}PRIVATE KEY-----"])

    def secret(self, kind: str) -> str:
        r, c = self.rng, self.chars
        upper_digits = string.ascii_uppercase + "234567"
        makers = {
            "aws_access_key": lambda: r.choice(["AKIA", "ASIA"]) + c(upper_digits, 16),
            "aws_secret_key": lambda: c(ALNUM + "/+", 40),
            "github_token": lambda: r.choice(
                [
                    f"{r.choice(['ghp', 'gho', 'ghs', 'ghu'])}_{c(ALNUM, 36)}",
                    f"github_pat_{c(ALNUM, 22)}_{c(ALNUM, 59)}",
                ]
            ),
            "slack_token": lambda: f"xox{r.choice('bpa')}-{c(string.digits, 12)}-{c(string.digits, 13)}-{c(ALNUM, 24)}",
            "stripe_key": lambda: f"{r.choice(['sk', 'rk'])}_live_{c(ALNUM, 24)}",
            "google_api_key": lambda: "AIza" + c(B64URL, 35),
            "openai_key": lambda: r.choice([f"sk-proj-{c(B64URL, 48)}", f"sk-{c(ALNUM, 48)}"]),
            "gitlab_token": lambda: "glpat-" + c(B64URL, 20),
            "jwt": self.jwt,
            "private_key": self.private_key,
            "high_entropy": lambda: c(ALNUM, r.randint(20, 40)),
            "npm_token": lambda: "npm_" + c(ALNUM, 36),
            "hf_token": lambda: "hf_" + c(ALNUM, 34),
            "azure_key": lambda: base64.b64encode(bytes(r.getrandbits(8) for _ in range(64))).decode(),
            "slack_webhook": lambda: (
                f"https://hooks.slack.com/services/T{c(upper_digits, 8)}/B{c(upper_digits, 10)}/{c(ALNUM, 24)}"
            ),
            "url_credentials": lambda: c(ALNUM + "!*-_~", r.randint(10, 20)),
            "cli_password": lambda: c(ALNUM + "!%^*_", r.randint(10, 16)),
        }
        value = makers[kind]()
        while kind in ("aws_secret_key", "high_entropy", "npm_token", "hf_token") and not (
            any(ch.isdigit() for ch in value) and any(ch.isupper() for ch in value)
        ):
            value = makers[kind]()
        return value


SECRET_KINDS = [
    "aws_access_key", "aws_secret_key", "github_token", "slack_token", "stripe_key", "google_api_key",
    "openai_key", "gitlab_token", "jwt", "private_key", "high_entropy", "npm_token", "hf_token", "azure_key",
    "slack_webhook", "url_credentials", "cli_password",
]  # fmt: skip
PII_KINDS = ["email", "phone", "ipv4", "ipv6", "card", "iban"]
CONFIG_NAMES = {
    "aws_access_key": "AWS_ACCESS_KEY_ID",
    "github_token": "GITHUB_TOKEN",
    "slack_token": "SLACK_BOT_TOKEN",
    "stripe_key": "STRIPE_SECRET_KEY",
    "google_api_key": "GOOGLE_MAPS_KEY",
    "openai_key": "OPENAI_API_KEY",
    "gitlab_token": "GITLAB_CI_TOKEN",
    "npm_token": "NPM_TOKEN",
    "hf_token": "HF_TOKEN",
    "slack_webhook": "SLACK_WEBHOOK_URL",
}
NAMES = ["Maria", "Tomasz", "Aiko", "Kwame", "Lena", "Ravi", "Sofia", "Omar"]


def secret_context(corpus: Corpus, kind: str, value: str, style: str) -> str:
    """``value`` where a person or a program would write a secret of ``kind`` (text, one line or a block)."""
    r = corpus.rng
    if kind == "aws_secret_key":
        return r.choice(
            [
                f"aws_secret_access_key = {value}",
                f"AWS_SECRET_ACCESS_KEY={value}",
                f'"SecretAccessKey": "{value}"',
                f"export AWS_SECRET_ACCESS_KEY='{value}'",
            ]
        )
    if kind == "high_entropy":
        key = r.choice(["api_key", "client_secret", "DB_PASSWORD", "auth_token", "apiKey", "secret", "password"])
        return r.choice(
            [f"{key}={value}", f"{key}: {value}", f'"{key}": "{value}"', f"{key} = '{value}'", f"--{key} {value}"]
        )
    if kind == "private_key":
        return f"key file follows:\n{value}\n"
    if kind == "azure_key":
        return (
            "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acct"
            f"{r.randrange(100)};AccountKey={value};EndpointSuffix=core.windows.net"
        )
    if kind == "url_credentials":
        return r.choice(
            [
                f"DATABASE_URL=postgres://app:{value}@db.internal:5432/orders",
                f"cloning https://deploy:{value}@git.example.com/team/repo.git",
                f"broker: amqp://worker:{value}@mq.internal:5672/vhost",
                f"redis://:{value}@cache.internal:6379/0",
            ]
        )
    if kind == "cli_password":
        return r.choice(
            [
                f"curl -u deploy:{value} https://api.example.com/v1/status",
                f"curl --user ci:{value} -X POST https://ci.example.com/hook",
                f"mysql -h db.internal -u app -p{value} orders",
                f"mysqldump -uroot -p'{value}' --all-databases",
            ]
        )
    if kind == "jwt":
        return r.choice([f"Authorization: Bearer {value}", f"session cookie {value} rejected", f"id_token={value}"])
    if style == "config":
        name = CONFIG_NAMES[kind]
        return r.choice([f"{name}={value}", f"{name.lower()}: {value}", f'"{name.lower()}": "{value}"'])
    if style == "log":
        return r.choice([f"loaded credential {value} from vault", f"using {value} for upstream", f"key={value}"])
    return r.choice([f"I pasted {value} by mistake", f"the key {value} still works", f"(token: {value})"])


def tickets(corpus: Corpus) -> str:
    r = corpus.rng
    out = []
    for n in range(40):
        name = r.choice(NAMES)
        parts = [f"Ticket #{48210 + n} - opened 2026-10-{1 + n % 28:02d} 09:{n % 60:02d}", f"From: {name}"]
        sentences = []
        for _ in range(r.randint(2, 4)):
            kind = r.choice(PII_KINDS)
            if corpus.count(kind) >= 10:
                continue
            value = corpus.plant("tickets.txt", "pii.v1", kind)
            sentences.append(
                r.choice(
                    {
                        "email": [f"You can reach me at {value}.", f"Please reply to {value} instead."],
                        "phone": [f"Call me back on {value} after 5pm.", f"My number is {value}."],
                        "ipv4": [f"The dashboard blocks my IP {value} since Monday.", f"I connect from {value}."],
                        "ipv6": [f"My router shows {value} as the address.", f"Blocked address: {value}"],
                        "card": [f"My card {value} was charged twice.", f"Please refund to card {value}."],
                        "iban": [f"Send the refund to {value}, thanks.", f"Our account is {value}."],
                    }[kind]
                )
            )
        if n % 5 == 0:
            kind = SECRET_KINDS[n // 5 % len(SECRET_KINDS)]
            value = corpus.plant("tickets.txt", "secrets.v1", kind)
            sentences.append(secret_context(corpus, kind, value, "ticket"))
        body = " ".join(sentences) or "The export is still slow, see the attached screenshot."
        out.append("\n".join([*parts, "", f"Hi team, {body} Order ORD-2026-{n:06d} is affected.", "", "---", ""]))
    return "\n".join(out)


def app_log(corpus: Corpus) -> str:
    r = corpus.rng
    out = []
    for n in range(160):
        ts = f"2026-11-03T{n % 24:02d}:{n % 60:02d}:{(n * 7) % 60:02d}.{n * 37 % 1000:03d}Z"
        level = ("INFO", "WARN", "ERROR", "DEBUG")[n % 4]
        service = ("checkout", "auth", "search")[n % 3]
        rid = uuid4(r)
        line = f"{ts} {level} [{service}] req={rid} latency_ms={r.randint(1, 900)}"
        if n % 2 == 0:
            kind = PII_KINDS[n // 2 % len(PII_KINDS)]
            if corpus.count(kind) < 20:
                value = corpus.plant("app.log", "pii.v1", kind)
                line += f" {kind}={value}" if r.random() < 0.5 else f' msg="contact {value} about order"'
        if n % 3 == 0:
            kind = SECRET_KINDS[n // 3 % len(SECRET_KINDS)]
            if corpus.count(kind) < 8:
                value = corpus.plant("app.log", "secrets.v1", kind)
                line += " " + secret_context(corpus, kind, value, "log")
        out.append(line)
    return "\n".join(out) + "\n"


def config(corpus: Corpus) -> str:
    r = corpus.rng
    out = []
    for kind in SECRET_KINDS:
        while corpus.count(kind) < PER_SECRET_KIND:
            value = corpus.plant("config.txt", "secrets.v1", kind)
            header = r.choice(["# .env", "# settings.yaml", "; app.ini", "# deploy.sh", "// config.json"])
            out.append(f"{header}\nLOG_LEVEL=info\nPORT=8080\n{secret_context(corpus, kind, value, 'config')}\n")
    return "\n".join(out)


def records(corpus: Corpus) -> str:
    r = corpus.rng
    out = []
    for n in range(240):
        rec: dict[str, object] = {
            "ts": f"2026-11-04T10:{n % 60:02d}:{n * 13 % 60:02d}Z",
            "level": ("info", "warn", "error")[n % 3],
            "order_id": f"ORD-2026-{n:06d}",
            "amount": round(r.uniform(5, 500), 2),
        }
        kind = PII_KINDS[n % len(PII_KINDS)]
        if corpus.count(kind) < PER_PII_KIND:
            value = corpus.plant("records.jsonl", "pii.v1", kind)
            if kind == "email":
                rec["customer"] = {"email": value, "tier": "gold"}
            elif kind == "card" and value.isdigit():
                rec["payment"] = {"card": int(value), "currency": "EUR"}
            else:
                rec["note"] = f"customer gave {value} on the phone"
        if n % 3 == 0:
            kind = SECRET_KINDS[n // 3 % len(SECRET_KINDS)]
            if corpus.count(kind) < 14:
                value = corpus.plant("records.jsonl", "secrets.v1", kind)
                if kind == "high_entropy":
                    rec["credentials"] = {"client_secret": value}
                elif kind == "aws_secret_key":
                    rec["aws"] = {"aws_secret_access_key": value}
                else:
                    rec["detail"] = secret_context(corpus, kind, value, "log")
        out.append(json.dumps(rec, separators=(",", ":")))
        if n in (30, 150):  # a line that is not JSON, with a planted value in it
            value = corpus.plant("records.jsonl", "pii.v1", "email")
            out.append(f"2026-11-04 10:{n % 60:02d}:00 WARN raw line from {value} (not JSON)")
    return "\n".join(out) + "\n"


def clean(corpus: Corpus) -> tuple[str, str]:
    """Text and JSON Lines with nothing to redact (in the judgement of a person reading them)."""
    r = corpus.rng
    lines, recs = [], []
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(r.getrandbits(8) for _ in range(150))).decode()
    for n in range(200):
        uuid = uuid4(r)
        sha = f"{r.getrandbits(256):064x}"
        day, month = 1 + n % 28, 1 + n % 12
        hh, mm, ss = n % 24, n * 3 % 60, n * 7 % 60
        pod = corpus.chars(string.ascii_lowercase + string.digits, 5)
        items = [
            f"2026-11-{day:02d}T{hh:02d}:{n % 60:02d}:{ss:02d}.{n % 1000:03d}+01:00",
            f"at {hh:02d}:{mm:02d}:{ss:02d}",
            f"on {day:02d}/{month:02d}/2026 and {day}.{month}.2026 and 2026/{month:02d}/{day:02d}",
            f"version {n % 5}.{n % 17}.{n % 9} (build {r.randint(1000, 99999)}), python 3.11.{n % 10}, node v20.1",
            f"Chrome/124.0.{r.randint(1000, 9999)}.{r.randint(10, 200)} Safari/537.36",
            f"request {uuid} commit {sha[:40]} digest sha256:{sha}",
            f"order ORD-2026-{r.randint(0, 999999):06d} invoice #{r.randint(10000, 99999)} JIRA-{r.randint(100, 9999)}",
            f"total ${r.randint(1, 9999):,}.{r.randint(0, 99):02d} (EUR {r.randint(1, 999)}.50) qty {r.randint(1, 50)}",
            f"epoch {1760000000 + r.randint(0, 10**7)} ms {1760000000000 + r.randint(0, 10**10)} took 0.{n:06d}s",
            f"listening on 0.0.0.0:{r.choice([8080, 8443, 5432])} pid {r.randint(100, 99999)} pod web-7d9f8-{pod}",
            f"position {r.uniform(-90, 90):.4f}, {r.uniform(-180, 180):.4f} size {r.randint(1, 999)} MiB {n % 100}%",
            f"thumbnail data:image/png;base64,{png[: 60 + n % 40]}",
            f"code: std::vector<int> v; a::b::c(); mac 00:1a:2b:{n % 100:02d}:4d:5e",
            "password: ******** (masked), DB_PASSWORD=${DB_PASSWORD}, token_type: Bearer, auth_method=oidc",
            f"max_tokens={r.randint(256, 8192)} page_token=CAE{r.randint(1000, 9999)} password_policy: min 12 chars",
            f"retry in {r.randint(1, 60)}s; range 1000-2000; matrix 3x4; call 1-2-3; room 4.05",
            f"firmware {r.randint(1, 9)}.{r.randint(0, 9)}.{r.randint(0, 20)}.{r.randint(0, 99)} on device {sha[:12]}",
            f"transaction ref {r.choice('3456')}{corpus.chars(string.digits, 15)} settled",
            f"ISBN 978-{r.randint(0, 9)}-{r.randint(10, 99)}-{r.randint(100000, 999999)}-{r.randint(0, 9)}",
            f"population {r.randint(1, 9)} {r.randint(100, 999)} {r.randint(100, 999)} {r.randint(100, 999)}",
            f"pi is 3.14159265358979, e is 2.718281828459045, ratio {r.random():.12f}",
        ]
        lines.append(items[n % len(items)] + "; " + items[(n * 7 + 3) % len(items)])
        recs.append(
            json.dumps(
                {
                    "ts": items[0].split()[0] if n % 2 else f"2026-11-{1 + n % 28:02d}T10:00:00Z",
                    "id": uuid,
                    "sha": sha,
                    "ver": f"{n % 5}.{n % 17}.{n % 9}",
                    "order": f"ORD-2026-{n:06d}",
                    "price": round(r.uniform(1, 999), 2),
                    "qty": r.randint(1, 9),
                    "epoch_ms": 1760000000000 + r.randint(0, 10**10),
                    "token_type": "Bearer",
                    "auth_method": "password",
                    "max_tokens": 4096,
                    "msg": items[(n * 3) % len(items)],
                },
                separators=(",", ":"),
            )
        )
    return "\n".join(lines) + "\n", "\n".join(recs) + "\n"


def build() -> dict[str, str]:
    """Every file of the corpus, by name."""
    corpus = Corpus()
    files = {
        "tickets.txt": tickets(corpus),
        "app.log": app_log(corpus),
        "records.jsonl": records(corpus),
        "config.txt": config(corpus),
    }
    for kind in PII_KINDS:  # top up any kind the documents left short, as a plain list in a ticket
        extra = []
        while corpus.count(kind) < PER_PII_KIND:
            extra.append(f"- {kind} on file: {corpus.plant('tickets.txt', 'pii.v1', kind)}")
        if extra:
            files["tickets.txt"] += "\nCustomer details appendix:\n" + "\n".join(extra) + "\n"
    files["clean.txt"], files["clean.jsonl"] = clean(corpus)
    files["annotations.json"] = json.dumps(corpus.annotations, indent=1) + "\n"
    return files


def main() -> None:
    for name, text in build().items():
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
