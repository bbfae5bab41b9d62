// Package browsertest drives the whole app in real headless Chromium (chromedp): sign-in,
// streaming chat with the demo model, approvals, question forms, the geolocation hook, two tabs
// deciding one call, reload while awaiting and the live reviewer inbox. It holds only tests;
// each state is saved as a screenshot under test-artifacts/ at the repository's root.
package browsertest
