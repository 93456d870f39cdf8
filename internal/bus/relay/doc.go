// Package relay turns every revision of the tool_calls bucket into its
// event on TOOL_EVENTS (Relay): the event of the transition it recorded,
// on that transition's subject, announced to the agent awaiting the call.
// Every relay process shares one durable consumer of the bucket's stream
// (RelayDurable).
package relay
