"""Many inference servers behind one endpoint: requests spread by fewest in flight, a replica that dies is
dropped and its requests go to the others. Stand-in servers here (two real vLLM CPU servers do not fit two
cores beside the tests); tests/test_vllm_server.py proves the list form against one real vLLM server."""
import threading

import pytest

from mascot.annotate.generate import generate_candidates
from mascot.config import ConfigError, GenerateParams, LLMEndpoint, Params
from mascot.llm.openai_backend import OpenAIBackend, ServerError
from mascot.resume import Journal
from tests.stand_in import StandIn, StandInServer
from tests.test_faults import many_queries  # noqa: F401  (fixture)


class Replica:
    """One stand-in server with its own request log; `die_after` requests, it drops the connection it is
    answering and stops listening (a crashed replica: later connections are refused)."""

    def __init__(self, die_after: int | None = None):
        replica = self
        self.bodies: list = []
        self.die_after = die_after

        class Handler(StandIn):
            # its own state, whatever other tests left on StandIn's class attributes
            bodies, fail_first, ok_budget, fault, chat_prefix, json_reply = self.bodies, 0, None, "503", "", None

            def do_POST(self):
                if replica.die_after is not None and len(replica.bodies) >= replica.die_after:
                    replica.kill()
                    self.close_connection = True
                    self.connection.close()
                    return
                super().do_POST()

        self.httpd = StandInServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.dead = False

    def kill(self):
        if not self.dead:
            self.dead = True
            self.httpd.socket.close()
            threading.Thread(target=self.httpd.shutdown, daemon=True).start()


@pytest.fixture
def replicas():
    made = []

    def make(n, die_after=None):
        for i in range(n):
            made.append(Replica(die_after[i] if die_after else None))
        return made[-n:]
    yield make
    for r in made:
        r.kill()


def backend(urls, **kw):
    return OpenAIBackend(LLMEndpoint(backend="openai", model="m", base_url=urls, backoff_s=0.01,
                                     max_concurrency=4, **kw))


def test_requests_spread_over_replicas(replicas, many_queries, personas, tmp_path):
    a, b = replicas(2)
    client = backend([a.url, b.url])
    out = generate_candidates(many_queries, personas, GenerateParams(num_agents_per_query=2), client,
                              Journal("g", tmp_path))
    assert len(out) == 40
    assert client.replicas.sent == {a.url: len(a.bodies), b.url: len(b.bodies)}
    assert len(a.bodies) + len(b.bodies) == 20 and a.bodies and b.bodies, client.replicas.sent  # each one served


def test_a_request_goes_to_the_replica_with_fewest_in_flight():
    from mascot.llm.openai_backend import Replicas

    r = Replicas(["a", "b", "c"])
    assert r.pick() == "a"  # an idle start: ties go to the one sent fewer, then the first
    r.in_flight.update(a=2, b=1, c=1)
    r.sent.update(a=5, b=4, c=1)
    assert r.pick() == "c"  # b and c have one in flight each; c was sent fewer
    r.in_flight["c"] = 3
    assert r.pick() == "b"
    assert r.drop("b", "refused") and r.pick() == "a"


def test_a_replica_dies_its_requests_go_to_the_others(replicas, many_queries, personas, tmp_path, capsys):
    a, b, c = replicas(3, die_after=[None, 3, None])
    client = backend([a.url, b.url, c.url])
    out = generate_candidates(many_queries, personas, GenerateParams(num_agents_per_query=2), client,
                              Journal("g", tmp_path))
    ids = [x["candidate_id"] for x in out]
    assert len(ids) == 40 and len(set(ids)) == 40  # every record once
    assert b.dead and list(client.replicas.lost) == [b.url]
    assert len(b.bodies) == 3 and len(a.bodies) + len(c.bodies) == 17  # b answered 3; the other 17 went elsewhere
    # b was sent at least one request more than it answered: the one it died on, which went to a or c
    assert client.replicas.sent[b.url] >= 4 and client.stats.retries == 0
    client.close()
    printed = capsys.readouterr().out
    assert f"replica {b.url} refused a connection" in printed and "requests per replica" in printed
    print(f"replica failover: sent {client.replicas.sent}, answered "
          f"{ {r.url: len(r.bodies) for r in (a, b, c)} }, lost {list(client.replicas.lost)}, records {len(ids)}")


def test_the_last_replica_is_retried_then_the_stage_fails(replicas, many_queries, personas, tmp_path):
    a, b = replicas(2, die_after=[2, 2])
    client = backend([a.url, b.url], max_retries=1)
    with pytest.raises(ServerError, match="after 2 attempts"):
        generate_candidates(many_queries, personas, GenerateParams(num_agents_per_query=2), client,
                            Journal("g", tmp_path))
    assert len(client.replicas.lost) == 1  # one dropped, the last kept and retried before failing
    assert Journal("g", tmp_path).resumed >= 0


def test_base_url_list_is_checked():
    assert LLMEndpoint(backend="openai", base_url=["http://a/v1/", "http://b/v1"]).base_urls == ["http://a/v1",
                                                                                              "http://b/v1"]
    with pytest.raises(ValueError, match="without repeats"):
        LLMEndpoint(backend="openai", base_url=["http://a/v1", "http://a/v1"])
    with pytest.raises((ValueError, ConfigError)):
        Params.model_validate({"llm": {"judge": {"backend": "openai", "base_url": []}}})
