// The text `llmk ab` scores when it is given none: plain English prose,
// written for this purpose, long enough for four chunks of 256 tokens under
// a byte-level BPE vocabulary of about 50,000 ids.
#include "apps/eval/compare.hpp"

namespace llmk::eval {

const std::string& default_text() {
  static const std::string text = R"(The lighthouse at the end of the harbour had not been lit for eleven years when Mara arrived in the town with a suitcase, a box of books and a letter from her aunt. The letter was short. It said that the house on the hill was hers now, that the roof leaked over the kitchen, and that the key was under the third stone to the left of the gate. It did not say anything about the lighthouse, but the lighthouse was the first thing Mara saw when the bus came over the ridge, and it was the last thing she looked at before she went to sleep that night.

In the morning she walked down to the harbour. The fishing boats were already out, and the only people on the quay were two old men mending a net and a boy who was trying to catch crabs with a piece of string and a bacon rind. Mara asked the old men about the lighthouse. One of them shrugged. The other one put down his needle and told her that the keeper had retired, that the council had promised to fix the lamp, and that the council had been promising the same thing for as long as he could remember.

"Ships have radar now," he said. "Nobody needs a light."

"Somebody must have needed it once," Mara said.

"Once," he agreed, and went back to his net.

The boy with the string had been listening. When Mara turned to go he followed her along the quay, keeping a few steps behind, the way a cat follows someone it has not yet decided to trust. At the end of the quay she stopped and waited for him.

"My grandfather kept the light," he said. "He still has the keys."

His name was Tomas, and his grandfather lived in a narrow house behind the church, with a garden full of beans and a kitchen that smelled of coffee and paraffin. The old keeper was thin and slow, but his eyes were quick, and he listened to Mara without interrupting. When she had finished he took a ring of heavy keys from a hook by the door and laid it on the table between them.

"The lamp is not broken," he said. "The council says it is broken because it is cheaper to say so than to pay a keeper. The mechanism needs oil and the glass needs cleaning. That is all."

"Then why has nobody done it?"

"Because nobody asked me," he said, and for the first time he smiled.

They went up the next evening, the three of them. The door at the bottom of the tower was stiff with salt, and the stairs were covered in a fine grey dust that rose around their feet and made Tomas sneeze. There were one hundred and twelve steps. Mara counted them on the way up, and on the way down she counted them again, because she did not believe the first number. At the top was a small round room with windows on every side, and in the middle of the room stood the lamp inside its great lens, like a jewel inside a larger jewel.

The old man showed them what to do. They wiped the brass gears and fed them oil from a can with a long thin spout. They polished the lens with soft cloths until their arms ached, working from the top to the bottom in slow circles, the way he told them to. They trimmed the wick and filled the tank. It took three evenings. On the fourth evening, when the sun had gone down behind the headland and the sea had turned the colour of slate, the old man struck a match.

The flame caught, small and yellow at first, and then the lens took hold of it and threw it out across the water in a long white beam. The gears began to turn. The beam swung slowly round, over the harbour, over the roofs of the town, over the dark fields behind it, and out again to sea. Down on the quay someone shouted. Lights came on in windows. By the time Mara and Tomas reached the bottom of the stairs there was a small crowd at the door of the tower, and the two old men from the net were at the front of it.

"Well," said the one who had told her that nobody needed a light. "Well, well."

The council sent a letter the following week. It said that the lighthouse was council property, that unauthorised persons were not permitted to enter it, and that the lamp must be extinguished at once for reasons of safety. Mara read the letter twice. Then she took it to the old keeper, who read it once and laughed so hard that he had to sit down.

"They will have to come and put it out themselves," he said. "And they will have to climb the stairs to do it."

Nobody came. The light went on every evening at dusk and off every morning at dawn. Tomas learned to do it on his own, and after a while the old keeper stopped climbing the stairs and only watched the beam from his garden, with a cup of coffee in his hands. In the autumn a storm came in from the west, the worst in twenty years. The radio lost its signal and the power failed across half the coast. That night a small boat with a broken engine drifted toward the rocks below the headland, and the man at its tiller, who had no radar and no radio and no idea where he was, saw a white light sweep across the rain and steered away from it until he found the harbour mouth.

He came up to the house on the hill the next day to say thank you. He was a teacher from a town along the coast, and he had gone out to fish because the forecast had been good. He said he had never been so glad to see anything in his life. Mara made him a cup of tea and did not tell him that the council had wanted the light put out.

In the spring the council sent another letter. This one said that, following a review, the lighthouse would be restored and a part-time keeper appointed, and that applications were invited. Tomas was too young to apply. His grandfather was too old. Mara wrote the application in the kitchen, under the place where the roof no longer leaked, and posted it on her way down to the harbour.

She got the job. She still has the letter, in a box with her aunt's letter and the council's first letter and a photograph of the three of them at the top of the tower, squinting into the wind. Tomas is grown now and has a boat of his own. When he comes in late, after dark, he says that the first thing he looks for is the light, and that he always finds it.
)";
  return text;
}

}  // namespace llmk::eval
