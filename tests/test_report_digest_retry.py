"""The daily digest when every channel refuses it: tried again with backoff for the rest of the
day (real loopback receivers that answer 500 and then 200, the digest service driven by its own
clock), its tries and next try kept in its state file and said in `specdeck notify HOST`'s line."""

import json
import time

import remote.areas  # noqa: F401 - the agent's areas, as its entry point installs them
from remote.core.daemon import Daemon
from remote.notify.channels import ChannelStore
from remote.report import digest
from tests.notify_receiver import Receiver
from tui.report.digest_text import digest_line


def reports(receiver):
    return [json.loads(r["body"]) for r in receiver.requests if b"specdeck report" in r["body"]]


def test_a_digest_every_channel_refused_is_tried_again_until_one_takes_it(agent_home):
    phone, mail = Receiver(mode="500"), Receiver(mode="500")
    try:
        ChannelStore().add(url=phone.url + "/phone", format="json")
        ChannelStore().add(url=mail.url + "/mail", format="json")
        eight = digest.due_today("08:00", time.time())
        clock = [eight - 600]
        digest.DigestStore().set("08:00", clock[0])
        service = digest.DigestService(Daemon("test"), clock=lambda: clock[0])

        clock[0] = eight + 5
        service.step()
        assert len(reports(phone)) == len(reports(mail)) == 1
        shown = digest.public(digest.DigestStore().get(), clock[0])
        assert shown["tries"] == 1 and shown["retry_at"] == eight + 5 + 60 and shown["next_at"] == eight + 65
        line = digest_line(shown)
        assert "not delivered at" in line and "(try 1 of " in line and "trying again at %s" % time.strftime("%H:%M:%S", time.localtime(eight + 65)) in line
        assert "last sent" not in line

        clock[0] = eight + 30  # before the retry: nothing
        service.step()
        assert len(reports(phone)) == 1

        clock[0] = eight + 65  # refused again: the wait grows
        service.step()
        assert len(reports(phone)) == len(reports(mail)) == 2
        state = json.loads((agent_home / "report" / "digest.json").read_text())
        assert state["tries"] == 2 and state["retry_at"] == eight + 65 + 120

        # A daemon started afresh reads the retry from the state file; the phone takes it this time.
        phone.mode = "ok"
        clock[0] = eight + 185
        digest.DigestService(Daemon("test"), clock=lambda: clock[0]).step()
        [first, *_, taken] = reports(phone)
        assert len(reports(phone)) == 3 and len(reports(mail)) == 3
        window = "(%s to " % time.strftime("%a %H:%M", time.localtime(eight - 86400))
        assert window in first["text"] and window in taken["text"]  # the refused tries' time too
        shown = digest.public(digest.DigestStore().get(), clock[0])
        assert shown["tries"] == 3 and shown["retry_at"] is None and shown["next_at"] > eight + 86400 - 7200
        line = digest_line(shown)
        assert "last sent" in line and "c1 delivered" in line and "c2 not delivered" in line and "trying again" not in line

        clock[0] = eight + 4000  # delivered: no more today
        service.step()
        assert len(reports(phone)) == 3
    finally:
        phone.close()
        mail.close()


def test_refused_late_in_the_day_the_digest_gives_up_until_tomorrow_and_says_so(agent_home):
    phone = Receiver(mode="500")
    try:
        ChannelStore().add(url=phone.url + "/phone", format="json")
        eight = digest.due_today("08:00", time.time())
        midnight = digest.tomorrow("00:00", eight)
        clock = [eight - 600]
        digest.DigestStore().set("08:00", clock[0])
        service = digest.DigestService(Daemon("test"), clock=lambda: clock[0])
        tries = 0
        clock[0] = eight
        while True:  # follow the retries through the day
            service.step()
            tries += 1
            assert len(reports(phone)) == tries
            shown = digest.public(digest.DigestStore().get(), clock[0])
            if shown["retry_at"] is None:
                break
            assert shown["retry_at"] < midnight
            clock[0] = shown["retry_at"]
        assert shown["tries"] == tries > 15 and clock[0] > midnight - 3600
        assert shown["next_at"] == digest.tomorrow("08:00", clock[0])
        assert "no more tries that day" in digest_line(shown)
        clock[0] = midnight - 1
        service.step()
        assert len(reports(phone)) == tries
    finally:
        phone.close()
