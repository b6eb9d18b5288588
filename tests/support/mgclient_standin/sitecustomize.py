"""Run at start-up by every Python process with this directory on its PYTHONPATH (a stream host the tests start,
and its stream processes): the Bolt sink connects to the stand-in (mgclient.py beside this file), not to a
server. Test support only: nothing in the product reads it."""
import mgclient

from stream_registry.graph.sinks import bolt

bolt.connect_driver = mgclient.connect
