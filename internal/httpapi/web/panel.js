// A card's panels: the forms that open in place of its buttons (reject
// with a reason, edit, answer, grant), one at a time; Escape closes one.

export function closePanels(card) {
  for (const p of card.querySelectorAll('.panel')) p.remove();
  const actions = card.querySelector('.actions');
  if (actions) actions.hidden = false;
}

export function openPanel(card, panel, focus) {
  closePanels(card);
  const actions = card.querySelector('.actions');
  if (actions) actions.hidden = true;
  panel.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      ev.preventDefault();
      closePanels(card);
      const b = card.querySelector('.actions button');
      if (b) b.focus();
    }
  });
  card.append(panel);
  focus.focus();
}
